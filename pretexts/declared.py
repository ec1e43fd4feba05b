"""What the built-in modules of a registry declare (names, summaries, parameters, presets), read from their source
without running it, so `pretexts list` imports no torch (the built-in tasks, methods and probes import it).

The reader evaluates only declarations: literals, names defined or imported inside `pretexts`, arithmetic,
dict unpacking, calls of a `Param` class (imported for real: pretexts.params and the probes' torch-free config)
and of a module function whose body is one `return`. Anything else raises `Unreadable`, and the registry imports
that registry's built-ins instead (slower, as correct). `tests/test_listing.py` checks that what is read equals
what the imported classes declare."""

import ast
import builtins
import os
import pkgutil
from dataclasses import dataclass, field
from importlib import import_module
from importlib.util import find_spec

from .params import Param

SAFE_BUILTINS = {name: getattr(builtins, name) for name in ("int", "float", "str", "bool", "tuple", "list", "dict")}
BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
}
UNARY = {ast.USub: lambda a: -a, ast.UAdd: lambda a: +a, ast.Not: lambda a: not a}


class Unreadable(Exception):
    """A declaration the reader does not evaluate; the registry imports its modules instead."""


@dataclass
class Declared:
    """One registered entry as its source declares it: `attrs` holds the attributes a listing reads
    (`params`, `method_params`, `presets`), as the class or function would have them."""

    name: str
    module: str
    summary: str
    attrs: dict = field(default_factory=dict)

    def __getattr__(self, key):
        try:
            return self.__dict__["attrs"][key]
        except KeyError:
            raise AttributeError(key) from None


def source_of(module: str) -> tuple[str, bool]:
    """(path of the module's source, whether it is a package), found without importing the module or any parent
    but `pretexts` itself (whose subpackages engine/ and backbones/ lie elsewhere: setuptools' package-dir)."""
    parts = module.split(".")
    locations = None
    for i, part in enumerate(parts):
        prefix = ".".join(parts[: i + 1])
        found = None
        for folder in locations or []:
            if os.path.isfile(os.path.join(folder, part, "__init__.py")):
                found = [os.path.join(folder, part)]
            elif os.path.isfile(os.path.join(folder, part + ".py")) and i == len(parts) - 1:
                return os.path.join(folder, part + ".py"), False
            if found:
                break
        if found is None:
            if i > 1:
                raise Unreadable(f"no source for {module}")
            spec = find_spec(prefix)  # imports at most `pretexts`, which imports no torch
            if spec is None or spec.submodule_search_locations is None:
                raise Unreadable(f"no source for {module}")
            found = list(spec.submodule_search_locations)
        locations = found
    return os.path.join(locations[0], "__init__.py"), True


class StaticClass:
    def __init__(self, reader: "ModuleReader", node: ast.ClassDef):
        self.reader, self.node = reader, node

    def own(self, key: str):
        """The value the class body itself assigns to `key`; KeyError when it assigns none."""
        value = None
        for stmt in self.node.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == key for t in stmt.targets):
                value = stmt.value
            elif (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.target.id == key
                and stmt.value is not None
            ):
                value = stmt.value
        if value is None:
            raise KeyError(key)
        return self.reader.evaluate(value)

    def attr(self, key: str, default=None):
        """`key` as the class has it: its own, else its bases' (in order; declarations use single inheritance)."""
        try:
            return self.own(key)
        except KeyError:
            pass
        for base in self.node.bases:
            parent = self.reader.evaluate(base)
            if isinstance(parent, StaticClass):
                found = parent.attr(key, KeyError)
                if found is not KeyError:
                    return found
            elif parent is not object:
                raise Unreadable(f"base {ast.unparse(base)} of {self.node.name}")
        return default

    def is_param(self) -> bool:
        if self.reader.module == Param.__module__ and self.node.name == Param.__name__:
            return True
        return any(
            isinstance(base, StaticClass) and base.is_param() for base in map(self.reader.evaluate, self.node.bases)
        )

    def real(self):
        return getattr(import_module(self.reader.module), self.node.name)


class ModuleReader:
    """One module's top-level names, evaluated on demand."""

    cache: dict = {}  # module -> reader, for one `read_builtins`

    def __init__(self, module: str):
        self.module = module
        path, self.is_package = source_of(module)
        with open(path, encoding="utf-8") as file:
            self.tree = ast.parse(file.read(), path)
        self.names: dict = {}
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        self.names[target.id] = ("expr", stmt.value)
                    elif (
                        isinstance(target, ast.Tuple)
                        and isinstance(stmt.value, ast.Tuple)
                        and len(target.elts) == len(stmt.value.elts)
                    ):  # A, B = 1, 2
                        for one, value in zip(target.elts, stmt.value.elts):
                            if isinstance(one, ast.Name):
                                self.names[one.id] = ("expr", value)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                self.names[stmt.target.id] = ("expr", stmt.value)
            elif isinstance(stmt, ast.ClassDef):
                self.names[stmt.name] = ("class", stmt)
            elif isinstance(stmt, ast.FunctionDef):
                self.names[stmt.name] = ("function", stmt)
            elif isinstance(stmt, ast.ImportFrom):
                source = self.absolute(stmt)
                for alias in stmt.names:
                    self.names[alias.asname or alias.name] = ("import", (source, alias.name))
        self.values: dict = {}

    @classmethod
    def of(cls, module: str) -> "ModuleReader":
        if module not in cls.cache:
            cls.cache[module] = cls(module)
        return cls.cache[module]

    def absolute(self, stmt: ast.ImportFrom) -> str:
        if not stmt.level:
            return stmt.module or ""
        package = self.module.split(".")
        if not self.is_package:
            package = package[:-1]
        package = package[: len(package) - stmt.level + 1]
        return ".".join(package + ([stmt.module] if stmt.module else []))

    def imported_modules(self) -> list[str]:
        """The modules of `pretexts` this module imports at its top level, in order (a package's parts)."""
        found = []
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ImportFrom):
                source = self.absolute(stmt)
                if source.startswith(self.module + "."):
                    found.append(source)
                elif source == self.module or stmt.level and source == self.module.rpartition(".")[0]:
                    found.extend(f"{source}.{alias.name}" for alias in stmt.names)
        return found

    def lookup(self, name: str):
        if name in self.values:
            return self.values[name]
        if name not in self.names:
            if name in SAFE_BUILTINS or name in ("None", "True", "False"):
                return SAFE_BUILTINS.get(name)
            try:  # `from package import submodule`
                return StaticModule(ModuleReader.of(f"{self.module}.{name}"))
            except (Unreadable, OSError):
                raise Unreadable(f"{self.module}.{name}") from None
        kind, node = self.names[name]
        if kind == "expr":
            value = self.evaluate(node)
        elif kind == "class":
            value = StaticClass(self, node)
        elif kind == "function":
            value = StaticFunction(self, node)
        else:
            source, attr = node
            if source != "pretexts" and not source.startswith("pretexts."):
                raise Unreadable(f"{name} from {source}")
            value = ModuleReader.of(source).lookup(attr)
        self.values[name] = value
        return value

    def evaluate(self, node: ast.AST, scope: dict | None = None):
        scope = scope or {}
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return scope[node.id] if node.id in scope else self.lookup(node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.evaluate(item, scope) for item in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            result = {}
            for key, value in zip(node.keys, node.values):
                if key is None:
                    result.update(self.evaluate(value, scope))
                else:
                    result[self.evaluate(key, scope)] = self.evaluate(value, scope)
            return result
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            return BINARY[type(node.op)](self.evaluate(node.left, scope), self.evaluate(node.right, scope))
        if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            return UNARY[type(node.op)](self.evaluate(node.operand, scope))
        if isinstance(node, ast.Attribute):
            owner = self.evaluate(node.value, scope)
            if isinstance(owner, StaticModule):
                return owner.reader.lookup(node.attr)
        if isinstance(node, ast.Call):
            function = self.evaluate(node.func, scope)
            args = [self.evaluate(arg, scope) for arg in node.args if not isinstance(arg, ast.Starred)]
            if len(args) != len(node.args) or any(k.arg is None for k in node.keywords):
                raise Unreadable(ast.unparse(node))
            kwargs = {k.arg: self.evaluate(k.value, scope) for k in node.keywords}
            if isinstance(function, StaticClass) and function.is_param():
                return function.real()(*args, **kwargs)
            if isinstance(function, StaticFunction):
                return function(*args, **kwargs)
        raise Unreadable(f"{self.module}: {ast.unparse(node)}")


@dataclass
class StaticModule:
    reader: ModuleReader


class StaticFunction:
    """A module function whose body is one `return EXPRESSION` (after its docstring), called on read values."""

    def __init__(self, reader: ModuleReader, node: ast.FunctionDef):
        self.reader, self.node = reader, node

    def __call__(self, *args, **kwargs):
        body = [
            stmt for stmt in self.node.body if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
        ]
        spec = self.node.args
        if len(body) != 1 or not isinstance(body[0], ast.Return) or spec.vararg or spec.kwarg or spec.kwonlyargs:
            raise Unreadable(f"function {self.node.name}")
        names = [arg.arg for arg in spec.posonlyargs + spec.args]
        defaults = dict(zip(names[len(names) - len(spec.defaults) :], spec.defaults))
        scope = dict(zip(names, args))
        for name in names[len(args) :]:
            scope[name] = kwargs[name] if name in kwargs else self.reader.evaluate(defaults[name])
        return self.reader.evaluate(body[0].value, scope)


def first_line(text: str | None) -> str:
    text = (text or "").strip()
    return text.splitlines()[0] if text else ""


def registrations(reader: ModuleReader, decorator: str, attrs: tuple[str, ...]) -> list[Declared]:
    """The entries `reader`'s module registers with `@decorator("name")` (or `@decorator("name", params)`, a
    function's parameters), in source order."""
    found = []
    for stmt in reader.tree.body:
        if not isinstance(stmt, (ast.ClassDef, ast.FunctionDef)):
            continue
        for deco in stmt.decorator_list:
            func = deco.func if isinstance(deco, ast.Call) else None
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called != decorator:
                continue
            name = reader.evaluate(deco.args[0])
            doc = first_line(ast.get_docstring(stmt))
            if isinstance(stmt, ast.FunctionDef):
                params = reader.evaluate(deco.args[1]) if len(deco.args) > 1 else {}
                found.append(Declared(name, reader.module, doc, {"params": dict(params or {})}))
                continue
            cls = StaticClass(reader, stmt)
            try:
                own = cls.own("summary")
            except KeyError:
                own = None
            values = {attr: cls.attr(attr, {}) for attr in attrs}
            found.append(Declared(name, reader.module, own if isinstance(own, str) and own else doc, values))
    return found


def read_builtins(builtin_modules: tuple[str, ...], decorator: str, attrs: tuple[str, ...]) -> list[Declared]:
    """Every entry the built-in modules register, in the order importing them would (a listed module, then the
    parts its package imports; "package.*": each module of the package, as pkgutil lists them)."""
    found, seen = [], set()
    ModuleReader.cache.clear()  # read the files as they are now

    def visit(module: str) -> None:
        if module in seen:
            return
        seen.add(module)
        reader = ModuleReader.of(module)
        for part in reader.imported_modules():
            visit(part)
        found.extend(registrations(reader, decorator, attrs))

    try:
        for module in builtin_modules:
            if module.endswith(".*"):
                path, _ = source_of(module[:-2])
                for info in pkgutil.iter_modules([os.path.dirname(path)]):
                    visit(f"{module[:-2]}.{info.name}")
            else:
                visit(module)
    except (OSError, SyntaxError, KeyError, TypeError, ValueError, IndexError) as err:
        raise Unreadable(f"{type(err).__name__}: {err}") from None
    return found
