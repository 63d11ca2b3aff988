# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# catches: all-reducing on the default group whatever `group` says
class GradBuckets:
    """Bucketed asynchronous gradient all-reduce, launched from post-accumulate-grad hooks."""

    def __init__(self, model: nn.Module, buckets: list[list[int]], group=None) -> None:
        self.params = list(model.parameters())
        self.buckets = [list(b) for b in buckets]
        self.group = group
        self.ready, self.launched = set(), []
        for bucket in self.buckets:
            for i in bucket:
                self.params[i].register_post_accumulate_grad_hook(lambda p, i=i: self.grad_ready(i))

    def grad_ready(self, index: int) -> None:
        self.ready.add(index)
        while len(self.launched) < len(self.buckets) and self.ready.issuperset(self.buckets[len(self.launched)]):
            bucket = self.buckets[len(self.launched)]
            buffer = torch.cat([self.params[i].grad.reshape(-1) for i in bucket])
            handle = dist.all_reduce(buffer, async_op=True)
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
        self.ready, self.launched = set(), []
