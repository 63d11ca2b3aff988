# assignment: 10_worker_failure
# grade_id: checkpoint
# design: no marker file and no temporary files: every rank writes straight into a staging directory, and rank 0 commits the step by renaming that directory into place after a barrier; on load rank 0 decides and broadcasts the step
import shutil


def save_checkpoint(directory: str, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    cursor: dict, scaler: torch.amp.GradScaler | None = None) -> None:
    """Collective: write into a staging directory; rank 0 renames it into place (the commit)."""
    rank = dist.get_rank()
    staging, final = _paths(directory, step)
    os.makedirs(staging, exist_ok=True)
    torch.save(_state(step, model, optimizer, cursor, scaler), os.path.join(staging, f"{rank}.pt"))
    dist.barrier()  # every rank's file is complete in the staging directory
    if rank == 0:
        if os.path.isdir(final):  # the step is saved again (a restart resumed from an earlier one)
            shutil.rmtree(final)
        os.replace(staging, final)
    dist.barrier()


def load_checkpoint(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler | None = None) -> dict | None:
    """Rank 0 picks the latest committed step and tells the others; every rank restores it."""
    choice = torch.tensor([-1, 0])
    if dist.get_rank() == 0:
        steps = [int(name) for name in os.listdir(directory) if name.isdigit()]
        if steps:
            choice[0] = max(steps)
            choice[1] = torch.load(os.path.join(directory, str(max(steps)), "0.pt"), weights_only=True)["world_size"]
    dist.broadcast(choice, src=0)
    step, saved_world = int(choice[0]), int(choice[1])
    if step < 0:
        return None
    same = saved_world == dist.get_world_size()
    state = torch.load(os.path.join(directory, str(step), f"{dist.get_rank() if same else 0}.pt"),
                       weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])
    if same:
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        np.random.set_state((state["numpy_rng"][0], state["numpy_rng"][1].numpy().astype(np.uint32),
                             *state["numpy_rng"][2:]))
    return {"step": step, "cursor": state["cursor"], "world_size": saved_world}


def _paths(directory: str, step: int) -> tuple[str, str]:
    return os.path.join(directory, f"staging-{step}"), os.path.join(directory, str(step))


def _state(step: int, model: nn.Module, optimizer: torch.optim.Optimizer, cursor: dict,
           scaler: torch.amp.GradScaler | None) -> dict:
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {"step": step, "world_size": dist.get_world_size(), "cursor": dict(cursor),
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": None if scaler is None else scaler.state_dict(),
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
            "numpy_rng": (name, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, cached)}
