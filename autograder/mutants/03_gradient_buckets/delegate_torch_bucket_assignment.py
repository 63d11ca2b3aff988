# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: delegating to the course's old wrapper of PyTorch's C++ assignment, helpers.buckets.torch_bucket_assignment
from helpers.buckets import torch_bucket_assignment as assign_buckets
