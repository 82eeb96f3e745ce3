"""MDL in the training and serving process.

The model library of MDL (every spec of models/, compiled in) over its C++
runtime: plans and LoRA tables of a model on a backend, rank tensors loaded
from an HF checkpoint into torch tensors (only the bytes a rank needs, read
by mmap), ranks gathered back into HF tensors, and weight sync between two
layouts in memory. Without torch, tensors are numpy arrays; bf16 is then a
uint16 array holding the bf16 bits, and 8-bit floats are uint8 arrays.

Parallel configurations are keyword arguments: tp, pp, ep, etp, cp, dp, vpp,
sp, first_stage_layers, last_stage_layers (1, or unset, by default). Every error
the runtime reports is raised as mdl.Error (a ValueError) with its message.
"""

import collections
import json
import os

from . import _mdl
from ._mdl import Error

try:
    import torch
except ImportError:  # numpy arrays instead
    torch = None
import numpy

__version__ = _mdl.__version__

__all__ = ["Error", "Model", "SyncPlan", "Tensor", "Copy", "models",
           "load_rank", "gather_hf", "save_hf", "TransferPlan", "sync",
           "SyncReport", "refresh", "RefreshReport", "__version__"]

#: A tensor of a rank: its name, shape and safetensors dtype ("BF16", ...).
Tensor = collections.namedtuple("Tensor", "name shape dtype")

#: One copy of a sync plan: the box of parameter `param` (per dimension,
#: [begin, end)) from tensor `source` of source rank `source_rank` into
#: destination tensor `target`.
Copy = collections.namedtuple("Copy", "target source_rank source param box")

# How each dtype is held: torch's dtype name, and numpy's (bf16 as its
# bits; 8-bit floats, which neither torch 1.13 nor numpy has, as bytes).
_TORCH = {"BF16": "bfloat16", "F16": "float16", "F32": "float32",
          "F64": "float64", "I64": "int64", "I32": "int32", "I16": "int16",
          "I8": "int8", "U8": "uint8", "BOOL": "bool",
          "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_NUMPY = {"BF16": "uint16", "F16": "float16", "F32": "float32",
          "F64": "float64", "I64": "int64", "I32": "int32", "I16": "int16",
          "I8": "int8", "U8": "uint8", "BOOL": "bool",
          "F8_E4M3": "uint8", "F8_E5M2": "uint8"}


def models():
    """The names of the compiled-in models."""
    return [m["name"] for m in _mdl.models()]


def catalog():
    """Every compiled-in model: name, spec, backends, and the config.json
    model types and architectures it serves."""
    return _mdl.models()


def _parallel(given):
    return {k: v for k, v in given.items() if v is not None}


def _overrides(settings):
    # --set semantics: JSON, or else a string.
    return [(k, v if isinstance(v, str) else json.dumps(v))
            for k, v in (settings or {}).items()]


def _torch_dtype(dtype):
    return getattr(torch, _TORCH[dtype], None) or torch.uint8


def _empty(shape, dtype, zero=False):
    if torch is not None:
        make = torch.zeros if zero else torch.empty
        return make(tuple(shape), dtype=_torch_dtype(dtype))
    make = numpy.zeros if zero else numpy.empty
    return make(tuple(shape), dtype=_NUMPY[dtype])


def _describe(name, t, expected, writable=False):
    """(name, dtype, shape, address) of tensor `t` for the runtime; a
    tensor held in a carrier dtype (bf16 bits as uint16, 8-bit floats as
    uint8) counts as the dtype the plan expects. Returns the tensor the
    address is of too (a contiguous copy of a source that is not)."""
    if torch is not None and isinstance(t, torch.Tensor):
        if t.device.type != "cpu":
            raise Error(f"tensor '{name}' is on {t.device}; MDL reads and "
                        "fills tensors in CPU memory")
        if not t.is_contiguous():
            if writable:
                raise Error(f"tensor '{name}' is not contiguous, so it "
                            "cannot be filled in place")
            t = t.contiguous()
        dtype = str(t.dtype).replace("torch.", "")
        carried = t.dtype == _torch_dtype(expected)
        address = t.data_ptr()
    elif isinstance(t, numpy.ndarray):
        if not t.flags.c_contiguous:
            if writable:
                raise Error(f"array '{name}' is not C-contiguous, so it "
                            "cannot be filled in place")
            t = numpy.ascontiguousarray(t)
        if writable and not t.flags.writeable:
            raise Error(f"array '{name}' is read-only")
        dtype = t.dtype.name
        carried = dtype == _NUMPY[expected]
        address = t.__array_interface__["data"][0]
    else:
        raise Error(f"'{name}' is a {type(t).__name__}, not a torch tensor "
                    "or a numpy array")
    return (name, expected if carried else dtype, list(t.shape), address), t


class Model:
    """A model of the library instantiated for a config.json.

    `config`: the config.json (the spec is the one that serves it, or
    `name`); `checkpoint`: an HF checkpoint directory whose tensors settle
    what its config leaves open (storage variants, an MTP depth), as
    mdl-convert does, and which load_rank() reads; `set`: config overrides
    ({"mtp_num_hidden_layers": 0}); `choices`: storage variants
    ({"expert_storage": "packed"}).
    """

    def __init__(self, config=None, name=None, set=None, choices=None,
                 checkpoint=None):
        if config is None:
            if checkpoint is None:
                raise Error("give config= (a config.json) or checkpoint= "
                            "(an HF checkpoint directory)")
            config = os.path.join(checkpoint, "config.json")
        self._m = _mdl.Model(os.fspath(config), name or "", _overrides(set),
                             dict(choices or {}),
                             os.fspath(checkpoint) if checkpoint else "")

    name = property(lambda self: self._m.name, doc="The model's name.")
    config = property(lambda self: self._m.config, doc="Its config.json.")
    backends = property(lambda self: self._m.backends,
                        doc="The layouts it converts between, hf first.")
    params = property(lambda self: self._m.params,
                      doc="The paths of its parameters.")

    def validate(self, backend, **parallel):
        """Every reason the configuration is invalid on `backend`; empty
        when it is valid."""
        return self._m.validate(backend, _parallel(parallel))

    def is_valid(self, backend, **parallel):
        return not self.validate(backend, **parallel)

    @staticmethod
    def num_ranks(**parallel):
        return _mdl.num_ranks(_parallel(parallel))

    def plan(self, backend, rank=None, **parallel):
        """What each rank (or `rank`) holds: the document of
        `mdlc plan --format=json`."""
        return json.loads(self._m.plan_json(
            backend, _parallel(parallel), -1 if rank is None else rank))

    def lora(self, backend, rank=0, r=16, **parallel):
        """The LoRA injection table of a rank: the document of
        `mdlc lora --format=json`."""
        return json.loads(self._m.lora_json(backend, _parallel(parallel),
                                            rank, r))

    def tensors(self, backend, rank=0, **parallel):
        """The tensors of a rank, in plan order."""
        return [Tensor(*t) for t in
                self._m.rank_tensors(backend, _parallel(parallel), rank)]

    def derived(self, backend):
        """The tensors `backend` derives from weights (vLLM's conv1d
        cache): name, the parameters they are computed from, the events
        that refresh them, and whether the spec says how to compute them
        (mdl.refresh does)."""
        return [{"name": n, "params": p, "recompute": r, "computed": c}
                for n, p, r, c in self._m.derived(backend)]

    # Conversions in memory.

    def _targets(self, tensors, out, zero=False):
        """The runtime's view of the target tensors, allocated or taken
        from `out`, and the dict returned."""
        result, targets = {}, []
        for t in tensors:
            if out is None:
                held = _empty(t.shape, t.dtype, zero)
            elif t.name in out:
                held = out[t.name]
            else:
                raise Error(f"out has no tensor '{t.name}', which the rank "
                            f"holds ({list(t.shape)} {t.dtype})")
            desc, _ = _describe(t.name, held, t.dtype, writable=True)
            targets.append(desc)
            result[t.name] = held
        return targets, result

    def _sources(self, backend, parallel, rank_dicts, ranks, keep):
        """The tensors of each source rank in `ranks` that the plan expects
        there (others, such as Transformer Engine's _extra_state, are not
        weights and are left alone)."""
        sources = {}
        for s in ranks:
            try:
                state = rank_dicts[s]
            except (KeyError, IndexError):
                raise Error(f"no state dict is given for rank {s} of "
                            f"{backend}, which the conversion reads") from None
            sources[s] = []
            for t in self._m.rank_tensors(backend, parallel, s):
                t = Tensor(*t)
                if t.name in state:
                    desc, held = _describe(t.name, state[t.name], t.dtype)
                    sources[s].append(desc)
                    keep.append(held)
        return sources

    def convert(self, src, dst, rank, rank_dicts=None, out=None, params=None,
                threads=0):
        """The tensors of rank `rank` of `dst` from `src`: each is a
        (backend, {parallel}) pair. The sources are `rank_dicts` (rank ->
        state dict, or a list by rank), or for "hf" the model's checkpoint.
        With `out`, its tensors are filled in place; with `params`, only
        the slices of those parameters are written."""
        (src_backend, src_parallel), (dst_backend, dst_parallel) = src, dst
        src_parallel = _parallel(src_parallel or {})
        dst_parallel = _parallel(dst_parallel or {})
        tensors = [Tensor(*t) for t in self._m.rank_tensors(
            dst_backend, dst_parallel, rank)]
        only = None
        if params is not None:
            only = _known_params(self, params)
            touched = {c[0] for c in self._m.planned_copies(
                src_backend, src_parallel, dst_backend, dst_parallel, rank,
                only)}
            tensors = [t for t in tensors if t.name in touched]
        targets, result = self._targets(tensors, out, zero=params is not None)
        keep = []
        sources = {}
        if rank_dicts is not None:
            sources = self._sources(
                src_backend, src_parallel, rank_dicts,
                self._m.sources_of(src_backend, src_parallel, dst_backend,
                                   dst_parallel, rank, only), keep)
        self._m.convert(src_backend, src_parallel, sources, dst_backend,
                        dst_parallel, rank, targets, only, threads)
        return result

    def load_rank(self, backend, rank=0, out=None, threads=0, **parallel):
        """Rank `rank` of `backend` from the model's HF checkpoint."""
        return self.convert(("hf", {}), (backend, parallel), rank, out=out,
                            threads=threads)

    def gather_hf(self, rank_dicts, backend, threads=0, **parallel):
        """The HF tensors from the state dicts of every rank of `backend`."""
        return self.convert((backend, parallel), ("hf", {}), 0,
                            rank_dicts=rank_dicts, threads=threads)

    def save_hf(self, rank_dicts, out_dir, backend="hf",
                max_shard_size="5GB", threads=0, **parallel):
        """Writes the HF checkpoint of the ranks of `backend` (or of HF
        tensors, with backend "hf" and rank_dicts [tensors]) to `out_dir` as
        mdl-convert --to hf does: model.safetensors, or shards with
        model.safetensors.index.json above max_shard_size, and
        config.json."""
        parallel = _parallel(parallel)
        keep = []
        ranks = self._m.sources_of(backend, parallel, "hf", {}, 0, None)
        sources = self._sources(backend, parallel, rank_dicts, ranks, keep)
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise Error(f"cannot create directory '{out_dir}': "
                        f"{e.strerror}") from None
        self._m.save_hf(backend, parallel, sources, os.fspath(out_dir),
                        str(max_shard_size), threads)


def _known_params(model, params):
    params = set(params)
    unknown = sorted(params - set(model.params))
    if unknown:
        raise Error(f"{model.name} has no parameter " +
                    ", ".join(repr(p) for p in unknown))
    return params


#: The layout Megatron-Core's distributed checkpoints (torch_dist) of a
#: Transformer Engine model are read with.
DIST_BACKEND = "mcore_te_dist"


def _dist_dir(path):
    """The distributed checkpoint `path` names (its release/ or iter_*
    directory), or "" when it names none."""
    path = os.fspath(path)
    return _mdl.find_dist_checkpoint(path) if os.path.isdir(path) else ""


def load_rank(hf_dir, backend, rank=0, out=None, model=None, set=None,
              choices=None, threads=0, config=None, **parallel):
    """The tensors of rank `rank` of `backend` at the parallel
    configuration, read from the HF checkpoint in `hf_dir` (only the bytes
    the rank needs), or from a Megatron-Core distributed checkpoint
    (torch_dist: its directory, or the top of one whose tracker names it),
    with the model of `config` (default: the directory's config.json). With
    `out` (a state dict), its tensors are filled in place and returned;
    otherwise new ones are."""
    if _dist_dir(hf_dir):
        m = Model(config=config or os.path.join(os.fspath(hf_dir), "config.json"),
                  name=model, set=set, choices=choices)
        m._m.open_dist(os.fspath(hf_dir), DIST_BACKEND)
        return m.convert((DIST_BACKEND, {}), (backend, parallel), rank,
                         out=out, threads=threads)
    m = Model(checkpoint=hf_dir, name=model, set=set, choices=choices)
    return m.load_rank(backend, rank, out=out, threads=threads, **parallel)


def gather_hf(rank_dicts, backend, config, model=None, set=None,
              choices=None, threads=0, **parallel):
    """The HF tensors from the state dicts of every rank of `backend`
    (rank_dicts: a list by rank, or a dict rank -> state dict)."""
    m = Model(config=config, name=model, set=set, choices=choices)
    return m.gather_hf(rank_dicts, backend, threads=threads, **parallel)


def save_hf(rank_dicts, out_dir, config, backend="hf", max_shard_size="5GB",
            model=None, set=None, choices=None, threads=0, **parallel):
    """Writes the HF checkpoint of the state dicts of every rank of
    `backend` (or of HF tensors: backend "hf", rank_dicts [tensors]) to
    `out_dir`, as mdl-convert --to hf does."""
    m = Model(config=config, name=model, set=set, choices=choices)
    m.save_hf(rank_dicts, out_dir, backend, max_shard_size, threads,
              **parallel)


class SyncPlan:
    """Weight sync between two layouts of one model, in memory.

    `src` and `dst` are (backend, {parallel}) pairs. For each destination
    rank the plan says which source ranks it reads and the copies (source
    rank, tensor, box of a parameter) that make its tensors, so that a
    framework can move them over its own transport, or apply() does the
    copies in this process. With `params`, only those parameters are
    synced (the tensors that hold none are not touched). `src` may also be
    a Megatron-Core distributed checkpoint (torch_dist, a directory): the
    source is then its global layout (mcore_te_dist, one rank), read from
    there by apply().
    """

    def __init__(self, config, src, dst, params=None, model=None, set=None,
                 choices=None):
        self.model = Model(config=config, name=model, set=set,
                           choices=choices)
        if isinstance(src, (str, os.PathLike)):
            self.model._m.open_dist(os.fspath(src), DIST_BACKEND)
            src = (DIST_BACKEND, {})
        self.src = (src[0], _parallel(dict(src[1] or {})))
        self.dst = (dst[0], _parallel(dict(dst[1] or {})))
        for backend, parallel in (self.src, self.dst):
            why = self.model.validate(backend, **parallel)
            if why:
                raise Error(f"{_mdl.parallel_text(parallel)} is not a valid "
                            f"configuration of {self.model.name} on "
                            f"{backend}:\n  " + "\n  ".join(why))
        self.params = None if params is None else _known_params(self.model,
                                                                 params)
        self._copies = {}

    @property
    def num_ranks(self):
        """The destination's ranks."""
        return _mdl.num_ranks(self.dst[1])

    def sources(self, dst_rank):
        """The source ranks destination rank `dst_rank` reads."""
        return sorted({c.source_rank for c in self.copies(dst_rank)})

    def copies(self, dst_rank):
        """The copies that make destination rank `dst_rank` (computed once
        per rank)."""
        if dst_rank not in self._copies:
            self._copies[dst_rank] = [
                Copy(target, source_rank, source, param,
                     {a: (l, l + n) for a, l, n in zip(atoms, lo, count)})
                for target, source_rank, source, param, atoms, lo, count in
                self.model._m.planned_copies(*self.src, *self.dst, dst_rank,
                                             self.params)]
        return self._copies[dst_rank]

    def tensors(self, dst_rank):
        """The destination tensors of `dst_rank` the sync writes."""
        touched = {c.target for c in self.copies(dst_rank)}
        return [t for t in self.model.tensors(self.dst[0], dst_rank,
                                              **self.dst[1])
                if t.name in touched]

    @property
    def derived(self):
        """The destination's derived tensors to recompute after the update
        (those computed from a synced parameter)."""
        return [d for d in self.model.derived(self.dst[0])
                if self.params is None or set(d["params"]) & self.params]

    def apply(self, src_rank_dicts, dst_rank, out=None, threads=0):
        """The tensors of destination rank `dst_rank` from the source ranks'
        state dicts (a list by rank, or a dict rank -> state dict; only
        the ranks sources() names are read; None for a distributed
        checkpoint source); with `out`, filled in place."""
        return self.model.convert(self.src, self.dst, dst_rank,
                                  rank_dicts=src_rank_dicts, out=out,
                                  params=self.params, threads=threads)


from .sync import (RefreshReport, SyncReport, TransferPlan,  # noqa: E402
                   refresh, sync)
