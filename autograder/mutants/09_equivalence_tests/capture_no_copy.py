# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: storing the live tensors instead of copies (later steps change the captured state)
def capture_update_state(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                         clip_coef: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Float64 copies of everything the step read or wrote (mask as bool)."""
    state = {"loss": loss.detach().double().clone(),
             "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
             "mask": mask.detach().clone()}
    for name, p in model.named_parameters():
        adam = optimizer.state[p]
        state[f"grad/{name}"] = p.grad.double()
        state[f"param/{name}"] = p.detach().double()
        state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double()
        state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"]
        state[f"step/{name}"] = torch.as_tensor(adam["step"]).detach().double().clone()
    return state
