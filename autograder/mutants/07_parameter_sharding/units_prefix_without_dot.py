# assignment: 07_parameter_sharding
# grade_id: unit_parameters
# catches: a name-prefix test without the ".": unit "1" claims "10.weight"
def unit_parameters(model: nn.Module, unit_names: list[str]) -> dict[str, list[str]]:
    """Parameter names each unit shards; shared parameters go to the root ''."""
    all_names = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        all_names.setdefault(id(param), []).append(name)
    owners = {u: [] for u in [*unit_names, ""]}
    for name, param in model.named_parameters():
        holders = [u for u in unit_names if all(n.startswith(u) for n in all_names[id(param)])]
        owners[max(holders, key=len, default="")].append(name)   # the longest holder is the innermost
    return owners
