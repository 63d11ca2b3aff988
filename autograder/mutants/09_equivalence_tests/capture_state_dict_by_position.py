# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: Adam's state read from optimizer.state_dict() by position: the wrong parameter's state with several parameter groups
def capture_update_state(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                         clip_coef: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Float64 copies of everything the step read or wrote (mask as bool)."""
    state = {"loss": loss.detach().double().clone(),
             "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
             "mask": mask.detach().clone()}
    adam_state = optimizer.state_dict()["state"]
    for index, (name, parameter) in enumerate(model.named_parameters()):
        adam = adam_state[index]
        state[f"grad/{name}"] = parameter.grad.detach().double().clone()
        state[f"param/{name}"] = parameter.detach().double().clone()
        state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double().clone()
        state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"].detach().double().clone()
        state[f"step/{name}"] = torch.as_tensor(adam["step"]).detach().double().clone()
    return state
