"""What a student's cell may not do: the grader refuses a cell that reaches for grading code.

Hidden tests run in the same kernel as the student's code, so a cell could change what
the checks see: register an IPython input transformer that blanks later cells, rebind a
checking function (``checks.assert_x = lambda *a: None``, ``torch.allclose = ...``), import
the instructor's references, or climb through interpreter internals (``__globals__``,
``sys.modules``, ``gc``) to do the same. :func:`refusal` reads a cell's code (after IPython's
own syntax transformation, so magics are seen as the calls they become) and names the first
such construct in one line. No correct solution of any exercise needs one.
"""
from __future__ import annotations

import ast

from IPython.core.inputtransformer2 import TransformerManager

# Importing these gives access to grading code, the kernel, or interpreter internals.
BANNED_MODULES = frozenset({
    "autograder", "builtins", "importlib", "ctypes", "gc", "inspect", "IPython", "ipykernel",
    "jupyter_client", "nbgrader", "nbclient", "nbformat", "sqlite3", "site", "sitecustomize",
    "runpy", "code", "codeop", "copyreg", "marshal", "imp", "zipimport", "pkgutil", "_thread",
    "__main__", "pickle", "cloudpickle", "dill", "shelve", "_pickle",
})

# ``sys`` itself is allowed (``sys.float_info``); these of its attributes reach grading code.
BANNED_SYS_ATTRIBUTES = frozenset({
    "modules", "_getframe", "settrace", "setprofile", "meta_path", "path_hooks",
    "path_importer_cache", "addaudithook", "displayhook", "excepthook", "call_tracing",
    "_current_frames", "monitoring",
})

# Calling (or even naming) these runs code the grader cannot read, or reaches the kernel.
BANNED_NAMES = frozenset({
    "get_ipython", "exec", "eval", "compile", "__import__", "globals", "vars", "locals", "breakpoint",
    "__builtins__", "__builtin__", "__loader__", "__spec__",
})

# Attributes that lead from an ordinary object to modules, frames, code or classes' internals.
BANNED_ATTRIBUTES = frozenset({
    "__globals__", "__code__", "__closure__", "__builtins__", "__dict__", "__class__",
    "__subclasses__", "__bases__", "__base__", "__mro__", "__getattribute__", "__setattr__",
    "__delattr__", "__self__", "__objclass__", "__func__", "__wrapped__", "__defaults__",
    "__kwdefaults__", "__import__", "__loader__", "__spec__", "__reduce__", "__reduce_ex__",
    "f_globals", "f_locals", "f_back", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame",
    "gi_code", "cr_frame", "ag_frame", "_getframe", "settrace", "setprofile", "meta_path",
    "path_hooks", "addaudithook", "input_transformers_cleanup", "input_transformers_post",
    "ast_transformers", "register_magic_function", "user_ns", "user_global_ns",
})

# Methods that make an object pass a comparison it should fail, or fake tensor operations.
BANNED_METHODS = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__float__",
    "__int__", "__index__", "__abs__", "__sub__", "__rsub__", "__torch_function__",
    "__torch_dispatch__", "__instancecheck__", "__subclasscheck__", "__getattr__",
})

# Magics that only time or plot the code they are given (which is checked like a cell).
SAFE_MAGICS = frozenset({"time", "timeit", "matplotlib"})

_SYNTAX = TransformerManager()


def python_source(cell_source: str) -> str:
    """The Python a cell runs: IPython magics and ``!`` lines become the calls they are."""
    try:
        return _SYNTAX.transform_cell(cell_source)
    except Exception:  # noqa: BLE001 - malformed input: let Python report it when it runs
        return cell_source


def imported_names(sources: list[str]) -> set[str]:
    """Names bound by ``import`` statements (and aliases of them) anywhere in ``sources``."""
    names: set[str] = set()
    modules: set[str] = set()  # bound by ``import x``: always modules, never the student's variable
    trees = []
    for source in sources:
        try:
            trees.append(ast.parse(python_source(source)))
        except SyntaxError:
            continue
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.update(a.asname or a.name for a in node.names)
    names -= _own_variables(trees, names | modules)
    names |= modules
    changed = True
    while changed:  # m = torch.nn  makes m a module too
        changed = False
        for tree in trees:
            for node in ast.walk(tree):
                if (isinstance(node, ast.Assign) and _root(node.value) in names
                        and _is_chain(node.value)):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and target.id not in names:
                            names.add(target.id)
                            changed = True
    return names


def _own_variables(trees: list[ast.AST], names: set[str]) -> set[str]:
    """Imported names the notebook also binds to its own values (``load = [0] * n``, a parameter ``run``).

    Such a name is the student's variable somewhere, so ``load[r] += 1`` must not be read as
    writing into a module. Binding it to a module chain (``checks = checks``) does not count.
    """
    own: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and not (_is_chain(node.value) and _root(node.value) in names):
                own.update(t.id for t in _flatten(list(node.targets)) if isinstance(t, ast.Name))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.AnnAssign, ast.NamedExpr)):
                own.update(t.id for t in _flatten([node.target]) if isinstance(t, ast.Name))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = node.args
                own.update(a.arg for a in args.posonlyargs + args.args + args.kwonlyargs)
    return own


def _is_chain(node: ast.AST) -> bool:
    """``a`` or ``a.b.c``: a name and attribute reads only."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _root(node: ast.AST) -> str | None:
    """The name an attribute/subscript chain starts from (``torch`` in ``torch.nn.x[0]``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


def _store_targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    if isinstance(node, ast.comprehension):
        return [node.target]
    return []


def _flatten(targets: list[ast.AST]) -> list[ast.AST]:
    out = []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            out.extend(_flatten(list(target.elts)))
        elif isinstance(target, ast.Starred):
            out.extend(_flatten([target.value]))
        else:
            out.append(target)
    return out


def _uses_type_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "type"
               for n in ast.walk(node))


def sys_names(tree: ast.AST) -> set[str]:
    """Names a cell binds to the ``sys`` module (``import sys``, ``import sys as s``)."""
    return {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
            for a in n.names if a.name == "sys"} | {"sys"}


def _problem(node: ast.AST, modules: set[str], sys_aliases: set[str]) -> str | None:
    """Why ``node`` is refused, or None."""
    if isinstance(node, ast.Attribute) and node.attr in BANNED_SYS_ATTRIBUTES and _root(node) in sys_aliases:
        return f"uses sys.{node.attr}"
    if isinstance(node, ast.ImportFrom) and node.module == "sys":
        banned = [a.name for a in node.names if a.name in BANNED_SYS_ATTRIBUTES or a.name == "*"]
        if banned:
            return f"imports {banned[0]} from sys"
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] in BANNED_MODULES:
                return f"imports {alias.name}"
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        if node.module.split(".")[0] in BANNED_MODULES:
            return f"imports from {node.module}"
    if isinstance(node, ast.Name) and node.id in BANNED_NAMES:
        return f"uses {node.id}"
    if isinstance(node, ast.Attribute) and node.attr in BANNED_ATTRIBUTES:
        return f"uses the attribute {node.attr}"
    if (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in BANNED_ATTRIBUTES | BANNED_NAMES):
        return f"names {node.value!r}"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in BANNED_METHODS:
        return f"defines {node.name}, which can make a wrong result compare as right"
    if isinstance(node, ast.Call) and any(k.arg == "weights_only" and not (isinstance(k.value, ast.Constant)
                                                                         and k.value.value is True)
                                          for k in node.keywords):
        return "loads with weights_only other than True (unpickling can run any code)"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
        if node.args and (_root(node.args[0]) in modules or _uses_type_call(node.args[0])):
            return f"calls {node.func.id} on {_dotted(node.args[0])}, which belongs to an imported module"
    for target in _flatten(_store_targets(node)):
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            if _root(target) in modules:
                return f"assigns to {_dotted(target)}, which belongs to an imported module"
            if _uses_type_call(target):
                return f"assigns to {_dotted(target)}, an attribute of a class"
    return None


def _safe_magic(node: ast.AST) -> tuple[ast.Name, str] | None:
    """``get_ipython().run_line_magic('time', code)`` (or a cell magic): its name node and code."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run_line_magic", "run_cell_magic")
            and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "get_ipython" and not node.func.value.args):
        return None
    args = node.args
    if not args or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
        return None
    if args[0].value not in SAFE_MAGICS:
        return None
    return node.func.value.func, "\n".join(a.value for a in args[1:])


def refusal(cell_source: str, modules: set[str]) -> str | None:
    """One line saying why a student cell is refused (``"line 3: assigns to ..."``), or None.

    ``modules`` are the names the notebook binds by ``import`` (see :func:`imported_names`):
    attribute assignment on them is refused. The policy fails closed: a cell it cannot read
    (a ``SyntaxError`` here, whatever the kernel's compiler flags would make of it) and a
    ``from __future__`` import (which changes how later cells compile) are refused too.
    """
    try:
        tree = ast.parse(python_source(cell_source))
    except SyntaxError as exc:
        return f"line {exc.lineno}: the grader cannot read this cell ({exc.msg})"
    future = next((n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "__future__"), None)
    if future is not None:
        return f"line {future.lineno}: imports from __future__ (it changes how later cells are read)"
    sys_aliases = sys_names(tree)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        magic = _safe_magic(node)
        if magic:
            name, code = magic
            allowed.add(id(name))
            inner = refusal(code, modules)
            if inner:
                return f"line {node.lineno}: inside a magic, {inner}"
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        problem = _problem(node, modules, sys_aliases)
        if problem:
            line = getattr(node, "lineno", None)
            return f"line {line}: {problem}" if line else problem
    return None
