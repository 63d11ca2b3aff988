# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# design: one bucket per module that owns parameters (in reverse module order), each a persistent flat buffer allocated once; hooks copy each gradient into its view as it arrives and count down the bucket's missing gradients
class GradBuckets:
    """Averages the gradients of `model` over `group` with asynchronous all-reduces launched during backward."""

    def __init__(self, model: nn.Module, group=None) -> None:
        self.group = group
        owners = [list(m.parameters(recurse=False)) for m in model.modules()]
        self.buckets = [params for params in reversed(owners) if params]
        self.buffers = [torch.zeros(sum(p.numel() for p in params)) for params in self.buckets]
        self.views = {}
        for k, params in enumerate(self.buckets):
            offset = 0
            for p in params:
                self.views[id(p)] = (k, self.buffers[k][offset:offset + p.numel()].view_as(p))
                offset += p.numel()
                p.register_post_accumulate_grad_hook(self.arrived)
        self.missing = [len(params) for params in self.buckets]
        self.handles = []

    def arrived(self, p: torch.Tensor) -> None:
        k, view = self.views[id(p)]
        view.copy_(p.grad)
        self.missing[k] -= 1
        while len(self.handles) < len(self.buckets) and self.missing[len(self.handles)] == 0:
            self.handles.append(dist.all_reduce(self.buffers[len(self.handles)], group=self.group, async_op=True))

    def wait(self) -> None:
        size = dist.get_world_size(self.group)
        for handle, params in zip(self.handles, self.buckets):
            handle.wait()
            for p in params:
                p.grad.copy_(self.views[id(p)][1]).div_(size)
        self.missing = [len(params) for params in self.buckets]
        self.handles = []
