# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# design: a fixed number of buckets (five, of equal parameter counts, in reverse registration order) whose gradients are flattened and divided by the group size before launch; readiness is a per-bucket counter keyed by parameter, and wait() unflattens with torch's helpers
class GradBuckets:
    """Averages the gradients of `model` over `group` with asynchronous all-reduces launched during backward."""

    NUM_BUCKETS = 5

    def __init__(self, model: nn.Module, group=None) -> None:
        self.group = group
        params = list(model.parameters())[::-1]
        count = min(self.NUM_BUCKETS, len(params))
        self.buckets = [params[k * len(params) // count:(k + 1) * len(params) // count] for k in range(count)]
        self.bucket_of = {id(p): k for k, bucket in enumerate(self.buckets) for p in bucket}
        for p in params:
            p.register_post_accumulate_grad_hook(self.on_grad)
        self.reset()

    def reset(self) -> None:
        self.arrived = [0] * len(self.buckets)
        self.in_flight = []

    def on_grad(self, p: torch.Tensor) -> None:
        self.arrived[self.bucket_of[id(p)]] += 1
        k = len(self.in_flight)
        while k < len(self.buckets) and self.arrived[k] == len(self.buckets[k]):
            flat = torch._utils._flatten_dense_tensors([q.grad for q in self.buckets[k]])
            flat /= dist.get_world_size(self.group)
            self.in_flight.append((dist.all_reduce(flat, group=self.group, async_op=True), flat))
            k += 1

    def wait(self) -> None:
        for bucket, (handle, flat) in zip(self.buckets, self.in_flight):
            handle.wait()
            for p, mean in zip(bucket, torch._utils._unflatten_dense_tensors(flat, [q.grad for q in bucket])):
                p.grad.copy_(mean)
        self.reset()
