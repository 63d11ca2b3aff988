# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: tampering: an IPython input transformer that blanks every later cell, tests included (the grader refuses the cell)
get_ipython().input_transformers_cleanup.append(lambda lines: [])


def assign_buckets(param_bytes, bucket_cap_bytes, first_bucket_cap_bytes=None, ready_order=None):
    raise NotImplementedError()
