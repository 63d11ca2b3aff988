# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# caught_by: test_grad_buckets
# catches: trusting that backward produces the gradients in reverse registration order: the hook only counts arrivals and launches a bucket once enough gradients have arrived, without checking which
class GradBuckets:
    """Averages the gradients of `model` over `group` with asynchronous all-reduces launched during backward."""

    def __init__(self, model: nn.Module, group=None) -> None:
        self.params = list(model.parameters())
        self.group = group
        sizes = [p.numel() * p.element_size() for p in self.params]
        cap = sum(sizes) / 4
        self.buckets, current, size = [], [], 0
        for i in reversed(range(len(self.params))):
            current.append(i)
            size += sizes[i]
            if size >= cap:
                self.buckets.append(current)
                current, size = [], 0
        if current:
            self.buckets.append(current)
        self.arrived, self.launched = 0, []
        for p in self.params:
            p.register_post_accumulate_grad_hook(self.grad_ready)

    def grad_ready(self, p: torch.Tensor) -> None:
        self.arrived += 1
        while (len(self.launched) < len(self.buckets)
               and self.arrived >= sum(len(b) for b in self.buckets[:len(self.launched) + 1])):
            bucket = self.buckets[len(self.launched)]
            buffer = torch.cat([self.params[i].grad.reshape(-1) for i in bucket])
            handle = dist.all_reduce(buffer, group=self.group, async_op=True)
            self.launched.append((handle, buffer))

    def wait(self) -> None:
        world_size = dist.get_world_size(self.group)
        for bucket, (handle, buffer) in zip(self.buckets, self.launched):
            handle.wait()
            offset = 0
            for i in bucket:
                grad = self.params[i].grad
                grad.copy_(buffer[offset:offset + grad.numel()].view_as(grad) / world_size)
                offset += grad.numel()
        self.arrived, self.launched = 0, []
