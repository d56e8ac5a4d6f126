"""Unit tests against candidate code in two processes (runs inside the sandbox; stdlib only).

`rewards/code.py` sends this file's source, with the files and one test, as one sandbox
execution. `t_main` (the test process) writes the files, makes itself undumpable (same-uid
processes can then neither ptrace it nor open its /proc files), and starts the candidate
process: a fresh `python -I` running `c_main`, which imports the candidate's modules and
serves requests over two pipes; its stdout and stderr go to /dev/null. Only the test process
runs the test code, with the candidate's modules replaced by proxies:

- calling a candidate function, reading an attribute or an item sends a request; the answer
  comes back as plain data (None, bool, int, float, complex, str, bytes, list, tuple, dict,
  set), decoded into exact built-in types here (a subclass such as Counter or a namedtuple
  arrives as its base type), so every `==`, `<`, `in` of the test runs on plain values in this
  process: an object whose `__eq__` always returns True never reaches it;
- any other object stays in the candidate process and is a handle here: attribute access,
  calls, items, len, bool, iteration, str/repr and isinstance are forwarded (each answer again
  plain or a handle), but comparisons are by identity;
- an exception raised there is raised here as the same built-in type, or as a local class of
  the same name deriving from the same built-in one (so `except ValueError` and
  `except mod.CustomError` work); mutated list/dict/set arguments are copied back;
- a function of the test passed as an argument (a key=, a callback) is called back here.

The test passes only when the test code ran to its end in this process, which then prints
the marker: the candidate can neither see the marker nor write to this process's output, so
`print(marker); os._exit(0)` in the candidate or reading the test's source does not pass.
"""

import builtins
import json
import os
import sys

MAX_FRAME = 64 << 20
MAX_DEPTH = 200
_PLAIN_SEQ = {list: "l", tuple: "t", set: "s", frozenset: "fs"}


# -- framing -------------------------------------------------------------------------------


def _read_exact(fd, size):
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame(fd):
    header = _read_exact(fd, 4)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > MAX_FRAME:
        raise ValueError(f"message of {size} bytes from the candidate process")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return json.loads(body)


def write_frame(fd, obj):
    data = json.dumps(obj).encode()
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


# -- plain values --------------------------------------------------------------------------


def encode(value, other, depth=0):
    """Tagged JSON for plain data (subclasses as their base type); `other(value)` encodes
    anything else (a handle, a callback) or raises TypeError."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply to compare")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, type) and value.__module__ == "builtins":
        return {"bt": value.__name__}  # int, str, ValueError...: the same type on both sides
    if isinstance(value, int):
        number = int.__int__(value)
        return number if number.bit_length() < 4000 else {"i": hex(number)}
    if isinstance(value, float):
        return {"f": float.__repr__(float.__float__(value))}
    if isinstance(value, complex):
        number = complex.__complex__(value)
        return {"c": [repr(number.real), repr(number.imag)]}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes | bytearray):
        tag = "ba" if isinstance(value, bytearray) else "b"
        return {tag: bytes(value).hex()}
    if isinstance(value, dict):
        items = dict.items(value)
        return {"d": [[encode(k, other, depth + 1), encode(v, other, depth + 1)] for k, v in items]}
    for base, tag in _PLAIN_SEQ.items():
        if isinstance(value, base):
            items = list(base.__iter__(value))
            return {tag: [encode(v, other, depth + 1) for v in items]}
    return other(value)


def decode(data, refs, depth=0):
    """Exact built-in values from `encode`'s JSON; `refs(obj)` turns a handle tag into
    whatever this side uses for it."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if data is None or isinstance(data, bool | int | str):
        return data
    if not isinstance(data, dict) or len(data) != 1 and "r" not in data:
        raise ValueError(f"not an encoded value: {str(data)[:80]}")
    (tag, body), *_ = data.items()
    if tag == "bt":
        kind = getattr(builtins, str(body), None)
        if (
            not isinstance(kind, type)
            or issubclass(kind, BaseException)
            and not issubclass(kind, Exception)
        ):
            raise ValueError(f"not a built-in type: {str(body)[:40]}")
        return kind
    if tag == "f":
        return float(body)
    if tag == "i":
        return int(body, 16)
    if tag == "c":
        return complex(float(body[0]), float(body[1]))
    if tag in ("b", "ba"):
        return (bytes if tag == "b" else bytearray).fromhex(body)
    if tag == "d":
        return {decode(k, refs, depth + 1): decode(v, refs, depth + 1) for k, v in body}
    if tag in ("l", "t", "s", "fs"):
        items = [decode(v, refs, depth + 1) for v in body]
        return {"l": list, "t": tuple, "s": set, "fs": frozenset}[tag](items)
    return refs(data)


# -- the candidate process -----------------------------------------------------------------


def c_main(req_fd, resp_fd):
    """Import the candidate's modules on demand and answer requests until the pipe closes."""
    import importlib

    sys.path.insert(0, os.getcwd())
    objects = {}  # handle -> object (kept alive for the whole execution)
    handles = {}  # id(object) -> handle

    def handle_of(obj):
        key = id(obj)
        if key not in handles:
            handles[key] = len(objects)
            objects[handles[key]] = obj
        return handles[key]

    def exc_mro(cls):
        return [[c.__qualname__, c.__module__, handle_of(c)] for c in cls.__mro__]

    def other(obj):
        out = {"r": handle_of(obj), "n": type(obj).__qualname__, "c": callable(obj)}
        if isinstance(obj, type) and issubclass(obj, BaseException):
            out["x"] = exc_mro(obj)
        return out

    def enc(value):
        return encode(value, other)

    def callback(number):
        def call(*args, **kwargs):
            write_frame(
                resp_fd,
                {"cb": number, "args": [enc(a) for a in args], "kwargs": enc(dict(kwargs))},
            )
            answer = read_frame(req_fd)
            if answer is None:
                os._exit(0)
            if "raise" in answer:
                kind = getattr(builtins, str(answer["raise"]["name"]), None)
                if not (isinstance(kind, type) and issubclass(kind, Exception)):
                    kind = Exception
                raise kind(answer["raise"]["text"])
            return dec(answer["value"])

        return call

    def refs(data):
        if "cb" in data:
            return callback(int(data["cb"]))
        return objects[int(data["r"])]

    def dec(data):
        return decode(data, refs)

    def answer(msg):
        op = msg["op"]
        if op == "import":
            module = importlib.import_module(msg["name"])
            return {"value": enc(module), "package": hasattr(module, "__path__")}
        target = objects[int(msg["ref"])] if "ref" in msg else None
        if op == "getattr":
            return {"value": enc(getattr(target, msg["name"]))}
        if op == "setattr":
            setattr(target, msg["name"], dec(msg["value"]))
            return {"value": None}
        if op == "getitem":
            return {"value": enc(target[dec(msg["key"])])}
        if op == "setitem":
            target[dec(msg["key"])] = dec(msg["value"])
            return {"value": None}
        if op == "delitem":
            del target[dec(msg["key"])]
            return {"value": None}
        if op == "call":
            args, kwargs = [dec(a) for a in msg["args"]], dec(msg["kwargs"])
            result = target(*args, **kwargs)
            after = {str(i): enc(args[i]) for i in msg["mutable"] if i < len(args)}
            after.update({k: enc(kwargs[k]) for k in msg["mutable_kw"] if k in kwargs})
            return {"value": enc(result), "after": after}
        if op == "len":
            return {"value": int(len(target))}
        if op == "bool":
            return {"value": bool(target)}
        if op == "list":
            return {"value": enc(list(target))}
        if op in ("str", "repr"):
            return {"value": str.__str__((str if op == "str" else repr)(target))}
        if op == "isinstance":
            return {"value": bool(isinstance(dec(msg["obj"]), target))}
        if op == "issubclass":
            return {"value": bool(issubclass(dec(msg["obj"]), target))}
        raise ValueError(f"unknown request {op!r}")

    while (msg := read_frame(req_fd)) is not None:
        if "op" not in msg:  # a stray callback answer: the protocol is out of step
            os._exit(3)
        try:
            reply = answer(msg)
        except BaseException as exc:  # the candidate's errors are answers
            try:
                args = [enc(a) for a in exc.args]
            except Exception:
                args = [str(exc)]
            reply = {"raise": {"mro": exc_mro(type(exc)), "args": args}}
        try:
            write_frame(resp_fd, reply)
        except (TypeError, ValueError) as exc:  # e.g. an unencodable exception argument
            write_frame(resp_fd, {"raise": {"mro": exc_mro(type(exc)), "args": [str(exc)]}})
    os._exit(0)


# -- the test process ----------------------------------------------------------------------


class CandidateError(Exception):
    """The candidate process died or broke the protocol."""


def module_names(files):
    """Module and package names the candidate's files define ("a/b/c.py" -> a, a.b, a.b.c)."""
    names, packages = set(), set()
    for path in files:
        parts = path.replace("\\", "/").strip("/").split("/")
        if not parts[-1].endswith(".py"):
            continue
        stem = parts[-1][:-3]
        dirs = parts[:-1]
        for i in range(1, len(dirs) + 1):
            packages.add(".".join(dirs[:i]))
        if stem != "__init__":
            names.add(".".join([*dirs, stem]))
    return names | packages, packages


def t_main(source, files, test, marker):
    import ctypes
    import importlib.abc
    import importlib.machinery
    import subprocess
    import types

    # Same-uid processes (the candidate) may no longer ptrace us or open our /proc files.
    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
        raise CandidateError("could not protect the test process (prctl)")
    for path, text in files.items():
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    boot = f"{source}\nc_main({req_r}, {resp_w})\n"
    child = subprocess.Popen(
        [sys.executable, "-I", "-c", boot],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(req_r, resp_w),
        close_fds=True,
    )
    os.close(req_r)
    os.close(resp_w)
    callbacks = []
    remotes = {}
    exc_classes = {}

    def exc_class(mro):
        """A local exception class standing for the candidate's (same name, same built-in
        base); built-in exceptions are themselves. Never SystemExit and the like."""
        base = Exception
        for name, module, _ in mro:
            kind = getattr(builtins, str(name), None) if module == "builtins" else None
            if isinstance(kind, type) and issubclass(kind, Exception):
                base = kind
                break
        cls = base
        own = [entry for entry in mro if entry[1] != "builtins"]
        for name, module, number in reversed(own):
            key = int(number)
            if key not in exc_classes:
                exc_classes[key] = type(str(name), (cls,), {"__module__": str(module)})
            cls = exc_classes[key]
        return cls

    def refs(data):
        if "x" in data:
            return exc_class(data["x"])
        key = int(data["r"])
        if key not in remotes:
            remotes[key] = Remote(key, str(data.get("n", "object")))
        return remotes[key]

    def other(value):
        if isinstance(value, Remote):
            return {"r": object.__getattribute__(value, "_ref")}
        if isinstance(value, type) and value in exc_classes.values():
            number = next(k for k, v in exc_classes.items() if v is value)
            return {"r": number}
        if callable(value):
            callbacks.append(value)
            return {"cb": len(callbacks) - 1}
        raise TypeError(f"cannot pass a {type(value).__name__} to the code under test")

    def enc(value):
        return encode(value, other)

    def dec(data):
        return decode(data, refs)

    def ask(**request):
        try:
            write_frame(req_w, request)
            while True:
                reply = read_frame(resp_r)
                if reply is None:
                    raise CandidateError("the code under test exited or was killed")
                if "cb" not in reply:
                    break
                try:  # the candidate calls a function of the test: run it here
                    fn = callbacks[int(reply["cb"])]
                    args = [dec(a) for a in reply["args"]]
                    write_frame(req_w, {"value": enc(fn(*args, **dec(reply["kwargs"])))})
                except Exception as exc:
                    write_frame(req_w, {"raise": {"name": type(exc).__name__, "text": str(exc)}})
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise CandidateError(f"broken answer from the code under test: {exc}") from None
        if "raise" in reply:
            error = reply["raise"]
            cls = exc_class(error["mro"])
            args = [dec(a) for a in error["args"]]
            try:
                exc = cls(*args)
            except Exception:
                exc = cls(*map(str, args))
            raise exc
        return reply

    def value(**request):
        return dec(ask(**request)["value"])

    class Remote:
        """A handle on an object of the candidate process (module docstring)."""

        __slots__ = ("_ref", "_type")

        def __init__(self, ref, type_name):
            object.__setattr__(self, "_ref", ref)
            object.__setattr__(self, "_type", type_name)

        def __getattr__(self, name):
            return value(op="getattr", ref=self._ref, name=name)

        def __setattr__(self, name, new):
            value(op="setattr", ref=self._ref, name=name, value=enc(new))

        def __call__(self, *args, **kwargs):
            mutable = [i for i, a in enumerate(args) if type(a) in (list, dict, set, bytearray)]
            mutable_kw = [k for k, a in kwargs.items() if type(a) in (list, dict, set, bytearray)]
            reply = ask(
                op="call",
                ref=self._ref,
                args=[enc(a) for a in args],
                kwargs=enc(kwargs),
                mutable=mutable,
                mutable_kw=mutable_kw,
            )
            for key, data in reply.get("after", {}).items():
                target = kwargs[key] if key in kwargs else args[int(key)]
                new = dec(data)
                if type(new) is not type(target):
                    continue
                if isinstance(target, list | bytearray):
                    target[:] = new
                else:
                    target.clear()
                    target.update(new)
            return dec(reply["value"])

        def __getitem__(self, key):
            return value(op="getitem", ref=self._ref, key=enc(key))

        def __setitem__(self, key, new):
            value(op="setitem", ref=self._ref, key=enc(key), value=enc(new))

        def __delitem__(self, key):
            value(op="delitem", ref=self._ref, key=enc(key))

        def __len__(self):
            return int(value(op="len", ref=self._ref))

        def __bool__(self):
            return value(op="bool", ref=self._ref) is True

        def __iter__(self):
            return iter(value(op="list", ref=self._ref))

        def __str__(self):
            return str(value(op="str", ref=self._ref))

        def __repr__(self):
            return str(value(op="repr", ref=self._ref))

        def __instancecheck__(self, obj):
            return value(op="isinstance", ref=self._ref, obj=enc(obj)) is True

        def __subclasscheck__(self, cls):
            return value(op="issubclass", ref=self._ref, obj=enc(cls)) is True

        def __eq__(self, other):
            return self is other  # never the candidate's __eq__

        def __ne__(self, other):
            return self is not other

        def __hash__(self):
            return id(self)

    class RemoteModule(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(name)
            return getattr(self.__dict__["_remote"], name)

    names, packages = module_names(files)

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            reply = ask(op="import", name=spec.name)
            module = RemoteModule(spec.name)
            module.__dict__["_remote"] = dec(reply["value"])
            if reply.get("package"):
                module.__path__ = []
            return module

        def exec_module(self, module):
            pass

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name not in names:
                return None
            return importlib.machinery.ModuleSpec(
                name, Loader(), is_package=name in packages or None
            )

    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    # A module this process has loaded already (json, os, the sandbox's preloads) stays the
    # standard library's even where a candidate file has its name: the harness relies on them.
    sys.meta_path.insert(0, Finder())
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(test, "<test>", "exec"), namespace)
    sys.stdout.write(f"\n{marker}\n")
    sys.stdout.flush()
    os.close(req_w)
    child.kill()
