"""Stand-ins for the classes a distributed checkpoint's `.metadata` pickles.

A `.metadata` file is a pickle of torch.distributed.checkpoint's Metadata.
Tests read and write such pickles with Python's own pickle against the
classes defined here, installed into sys.modules under the exact module
paths torch uses, so that nothing of torch is imported (Debian's torch 1.13
cannot import its own `_shard` checkpoint package under Python 3.11, and has
no `torch.distributed.checkpoint`). The classes behave as torch's do when
pickled: dataclasses pickle as NEWOBJ and BUILD with their `__dict__`;
TensorProperties' state is a 5-tuple; torch.Size reduces to a call of
itself with a tuple; dtypes are globals of `torch`; the layout reduces to
`torch.serialization._get_layout("torch.strided")`.

Paths (torch's `torch/distributed/checkpoint/metadata.py`, `filesystem.py`;
1.13's `torch/distributed/_shard/checkpoint/...` and
`_shard/sharded_tensor/metadata.py`; Megatron-Core 0.15's
`megatron/core/dist_checkpointing/strategies/torch.py`):

  PATHS["2.x"]    every class under torch.distributed.checkpoint
  PATHS["shard"]  the same, TensorProperties and MEM_FORMAT_ENCODING from
                  torch.distributed._shard.sharded_tensor.metadata (which
                  every torch from 1.13 to 2.11 reads)
  PATHS["1.13"]   everything under torch.distributed._shard

Import this module before anything imports torch.
"""
import enum
import pickle
import sys
import types

if "torch" in sys.modules and not getattr(sys.modules["torch"], "_mdl_standin", False):
    raise RuntimeError("torch_dist.py installs stand-ins for torch: import it "
                       "before torch (or in a process without torch)")

DCP = "torch.distributed.checkpoint"
SHARD = "torch.distributed._shard"
MCORE = "megatron.core.dist_checkpointing.strategies.torch"


def module(name):
    """The stand-in module `name` (and its parents), created on first use."""
    if name in sys.modules:
        return sys.modules[name]
    m = types.ModuleType(name)
    m._mdl_standin = True
    sys.modules[name] = m
    if "." in name:
        parent, _, leaf = name.rpartition(".")
        setattr(module(parent), leaf, m)
    return m


def define(mod, cls):
    """Puts class `cls` into module `mod` under its name."""
    cls.__module__ = mod
    cls.__qualname__ = cls.__name__
    setattr(module(mod), cls.__name__, cls)
    return cls


torch = module("torch")


class Size(tuple):
    def __reduce__(self):
        return (Size, (tuple(self),))


define("torch", Size)


class dtype:
    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name

    def __repr__(self):
        return "torch." + self.name


define("torch", dtype)
DTYPES = {}
for _name in ["bfloat16", "float16", "float32", "float64", "int64", "int32",
              "int16", "int8", "uint8", "bool", "float8_e4m3fn", "float8_e5m2",
              "complex64"]:
    DTYPES[_name] = dtype(_name)
    setattr(torch, _name, DTYPES[_name])


class layout:
    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (_get_layout, (self.name,))


def _get_layout(name):
    return layout(name)


_get_layout.__module__ = "torch.serialization"
module("torch.serialization")._get_layout = _get_layout
STRIDED = layout("torch.strided")


def properties_class(mod, enum_name):
    """TensorProperties and its memory format enum in module `mod`."""
    enc = enum.Enum(enum_name, [("TORCH_CONTIGUOUS_FORMAT", 0),
                                ("TORCH_CHANNELS_LAST", 1),
                                ("TORCH_PRESERVE_FORMAT", 2)], module=mod)
    enc.__qualname__ = enum_name
    setattr(module(mod), enum_name, enc)

    class TensorProperties:
        def __init__(self, dtype=None):
            self.dtype = dtype
            self.layout = STRIDED
            self.requires_grad = False
            self.memory_format = enc.TORCH_CONTIGUOUS_FORMAT
            self.pin_memory = False

        def __getstate__(self):
            return (self.dtype, self.layout, self.requires_grad,
                    self.memory_format, self.pin_memory)

        def __setstate__(self, state):
            (self.dtype, self.layout, self.requires_grad, self.memory_format,
             self.pin_memory) = state
            assert isinstance(self.memory_format, enc), self.memory_format

    return define(mod, TensorProperties)


def plain_class(mod, name, fields):
    """A dataclass-like class: its fields as keyword arguments."""
    def __init__(self, *args, **kwargs):
        for f, v in zip(fields, args):
            setattr(self, f, v)
        for f, v in kwargs.items():
            setattr(self, f, v)
    return define(mod, type(name, (), {"__init__": __init__, "_fields": fields}))


def metadata_classes(md_mod, fs_mod, props):
    """The classes of one set of paths, by name."""
    c = {
        "Metadata": plain_class(md_mod, "Metadata",
                                ["state_dict_metadata", "planner_data",
                                 "storage_data"]),
        "TensorStorageMetadata": plain_class(md_mod, "TensorStorageMetadata",
                                             ["properties", "size", "chunks"]),
        "ChunkStorageMetadata": plain_class(md_mod, "ChunkStorageMetadata",
                                            ["offsets", "sizes"]),
        "BytesStorageMetadata": plain_class(md_mod, "BytesStorageMetadata", []),
        "MetadataIndex": plain_class(md_mod, "MetadataIndex",
                                     ["fqn", "offset", "index"]),
        "_StorageInfo": plain_class(fs_mod, "_StorageInfo",
                                    ["relative_path", "offset", "length"]),
        "TensorProperties": props,
    }
    return c


_dcp_props = properties_class(DCP + ".metadata", "_MEM_FORMAT_ENCODING")
_shard_props = properties_class(SHARD + ".sharded_tensor.metadata",
                                "MEM_FORMAT_ENCODING")
PATHS = {
    "2.x": metadata_classes(DCP + ".metadata", DCP + ".filesystem", _dcp_props),
    "1.13": metadata_classes(SHARD + ".checkpoint.metadata",
                             SHARD + ".checkpoint.filesystem", _shard_props),
}
PATHS["shard"] = dict(PATHS["2.x"], TensorProperties=_shard_props)
plain_class(DCP + ".metadata", "StorageMeta",
            ["checkpoint_id", "save_id", "load_id", "modules"])
MCoreMetadata = define(MCORE, type("MCoreMetadata", (PATHS["2.x"]["Metadata"],), {}))
MCoreSavePlan = plain_class(MCORE, "MCoreSavePlan",
                            ["items", "storage_data", "planner_data", "usable"])
WriteItem = plain_class(DCP + ".planner", "WriteItem",
                        ["index", "type", "tensor_data"])


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def convert(md, paths, root=None):
    """A copy of Metadata `md` whose objects are of the classes of `paths`
    (a key of PATHS); `root` replaces the root's class."""
    c = PATHS[paths]

    def props(p):
        out = c["TensorProperties"](p.dtype)
        return out

    def index(i):
        out = c["MetadataIndex"](i.fqn)
        if getattr(i, "offset", None) is not None:
            out.offset = Size(i.offset)
        out.index = getattr(i, "index", None)
        return out

    sdm = {}
    for k, v in md.state_dict_metadata.items():
        if type(v).__name__ == "BytesStorageMetadata":
            sdm[k] = c["BytesStorageMetadata"]()
        else:
            sdm[k] = c["TensorStorageMetadata"](
                props(v.properties), Size(v.size),
                [c["ChunkStorageMetadata"](Size(ch.offsets), Size(ch.sizes))
                 for ch in v.chunks])
    storage = {index(i): c["_StorageInfo"](s.relative_path, s.offset, s.length)
               for i, s in md.storage_data.items()}
    return (root or c["Metadata"])(sdm, None, storage)


def dump(md, path, protocol=4):
    with open(path, "wb") as f:
        pickle.dump(md, f, protocol=protocol)
