"""torch_openreg/_C.pyi declares exactly the bindings torch_openreg._C has.

mypy checks the package's calls into the extension against the stub, and cannot read the .so: a
binding missing from the stub is an error at its callers, and a name the module lacks would type-check
calls that fail at runtime. This compares the stub's public names (functions, classes and their
members, submodules) with the real module's, recursively, and each function's argument count with the
signature pybind11 reports, so the stub cannot silently fall behind a binding.
"""

import ast
import inspect
import json
import re
import types
from pathlib import Path

import pytest
import torch_openreg
from torch_openreg import _C

STUB = Path(torch_openreg.__file__).with_name("_C.pyi")

# Attributes pybind11 itself puts on its modules and classes (not bindings).
PYBIND11_OWN = {"_pybind11_conduit_v1_"}

# Stub-only declarations: types the stub names that the module does not have (the dicts bindings build).
STUB_ONLY_BASES = {"TypedDict", "Protocol"}


def _public(name: str) -> bool:
    return not (name.startswith("__") and name.endswith("__")) and name not in PYBIND11_OWN


def _base_names(node: ast.ClassDef) -> set:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}


class _Scope:
    """A module or class body of the stub: its members by kind."""

    def __init__(self, body: list) -> None:
        self.functions: dict[str, ast.FunctionDef] = {}
        self.properties: set = set()
        self.classes: dict[str, "_Scope"] = {}
        self.attributes: set = set()  # annotated names: submodules (`x: _XModule`), class attributes
        self.stub_only: set = set()
        for node in body:
            if isinstance(node, ast.FunctionDef):
                decorators = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
                if "property" in decorators:
                    self.properties.add(node.name)
                else:
                    self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                if _base_names(node) & STUB_ONLY_BASES:
                    self.stub_only.add(node.name)
                else:
                    self.classes[node.name] = _Scope(node.body)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                self.attributes.add(node.target.id)
            elif isinstance(node, ast.Assign):
                self.attributes.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def names(self) -> set:
        return {n for n in (*self.functions, *self.properties, *self.classes, *self.attributes) if _public(n)}


def _stub() -> _Scope:
    return _Scope(ast.parse(STUB.read_text(), filename=str(STUB)).body)


def _runtime_names(obj: object) -> set:
    if isinstance(obj, type):
        # a class's own members and those of its pybind11 bases, not object's
        return {n for c in obj.__mro__ if c is not object for n in vars(c) if _public(n)}
    return {n for n in dir(obj) if _public(n)}


def _compare(scope: _Scope, obj: object, where: str) -> list:
    """Differences between a stub scope and the object it declares, recursively."""
    problems = []
    declared, actual = scope.names(), _runtime_names(obj)
    for name in sorted(actual - declared):
        problems.append(f"{where}.{name} is a binding the stub does not declare")
    for name in sorted(declared - actual):
        problems.append(f"{where}.{name} is declared in the stub but {where} has no such attribute")
    for name in sorted(scope.stub_only):
        if hasattr(obj, name):
            problems.append(f"{where}.{name} is declared stub-only (TypedDict/Protocol) but exists at runtime")
    for name in sorted(declared & actual):
        value = inspect.getattr_static(obj, name) if isinstance(obj, type) else getattr(obj, name)
        if name in scope.classes:
            if isinstance(value, (type, types.ModuleType)):
                problems += _compare(scope.classes[name], value, f"{where}.{name}")
            else:
                problems.append(f"{where}.{name} is a class in the stub but a {type(value).__name__} at runtime")
        elif name in scope.properties:
            if not isinstance(value, property):
                problems.append(f"{where}.{name} is a property in the stub but a {type(value).__name__} at runtime")
        elif name in scope.functions:
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if not callable(value) or isinstance(value, type):
                problems.append(f"{where}.{name} is a function in the stub but a {type(value).__name__} at runtime")
    return problems


def test_stub_declares_exactly_the_bindings():
    problems = _compare(_stub(), _C, "_C")
    assert not problems, "\n".join(problems)


def test_stub_has_no_getattr_fallback():
    # A module-level __getattr__ makes every name type-check as Any.
    assert "__getattr__" not in _stub().functions


def _pybind11_arity(doc: str, name: str):
    """The argument count in pybind11's signature line `name(arg0: T, arg1: U) -> R`, or None."""
    first = (doc or "").strip().splitlines()[0] if doc else ""
    m = re.match(rf"{re.escape(name)}\((.*)\) -> ", first)
    if m is None:  # an overloaded binding ("Overloaded function.") or no signature
        return None
    depth, count, inside = 0, 0, m.group(1).strip()
    if not inside:
        return 0
    for ch in inside:  # top-level commas only: types may be tuple[int, int], Sequence[...]
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
    return count + 1


def _stub_arity(fn: ast.FunctionDef) -> int:
    a = fn.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)


def _functions(scope: _Scope, obj: object, where: str):
    for name, fn in scope.functions.items():
        if _public(name) or name == "__init__":
            value = getattr(obj, name, None)
            if value is not None:
                yield f"{where}.{name}", name, fn, value
    for name, sub in scope.classes.items():
        value = getattr(obj, name, None)
        if value is not None:
            yield from _functions(sub, value, f"{where}.{name}")


@pytest.mark.parametrize("where,name,fn,value", [pytest.param(*f, id=f[0]) for f in _functions(_stub(), _C, "_C")])
def test_stub_argument_counts_match(where, name, fn, value):
    expected = _pybind11_arity(value.__doc__, name)
    # An overloaded binding has no single signature: its stub needs @overload and this check a way to
    # compare them, so it fails here rather than pass unchecked.
    assert expected is not None, f"{where}: pybind11 gives no single signature (an overloaded binding?)"
    # Methods: pybind11 lists `self` as its first argument, as the stub does.
    assert _stub_arity(fn) == expected, f"{where}: the stub takes {_stub_arity(fn)} arguments, the binding {expected}"


def test_unnamed_arguments_are_positional_only():
    # No binding names its arguments (py::arg): pybind11 accepts them by position only, so a stub
    # parameter that could be passed by keyword would type-check calls that fail.
    for where, _name, fn, value in _functions(_stub(), _C, "_C"):
        doc = (value.__doc__ or "").strip().splitlines()
        if doc and re.search(r"\barg\d+:", doc[0]):
            a = fn.args
            keywordable = [p.arg for p in a.args if p.arg != "self"] + [p.arg for p in a.kwonlyargs]
            assert not keywordable, f"{where}: {keywordable} can be passed by keyword in the stub, not at runtime"


# The stub-only TypedDicts, by the binding that returns them.
TYPED_DICTS = {
    "_DeviceProperties": "_C._get_device_properties(0)",
    "_DeviceProfile": "_C._device_profile()",
    "_VirtualDeviceTime": "_C._virtual_device_time(0)",
}


def test_typed_dicts_match_the_dicts_the_bindings_build(run_python, check_ok):
    # With a device profile, so that _device_profile returns its dict (the runtime reads it once, at start).
    code = f"""
        import json
        import torch
        from torch_openreg import _C
        dicts = {{{", ".join(f"{name!r}: {call}" for name, call in TYPED_DICTS.items())}}}
        print(json.dumps({{name: {{k: type(v).__name__ for k, v in d.items()}} for name, d in dicts.items()}}))
    """
    proc = run_python(code, env={"OPENREG_DEVICE_PROFILE": "h100-sxm"})
    check_ok(proc)
    actual = json.loads(proc.stdout.strip().splitlines()[-1])
    stub = ast.parse(STUB.read_text()).body
    for node in stub:
        if isinstance(node, ast.ClassDef) and node.name in TYPED_DICTS:
            declared = {
                item.target.id: ast.unparse(item.annotation)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
            assert declared == actual[node.name], f"{node.name} ({TYPED_DICTS[node.name]})"
    assert set(TYPED_DICTS) == _stub().stub_only  # every stub-only dict is checked here
