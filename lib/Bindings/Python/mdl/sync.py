"""Live weight sync between processes: transfer plans and their executor.

A TransferPlan (computed by the runtime, in C++) says which bytes move from
each rank of a source layout (a trainer's) to each rank of a destination
layout (a serving engine's): segments, each a box of one parameter seen as
a strided view of a source tensor and of a destination tensor, packed into
buckets of their link at fixed offsets, in a schedule every process shares.
sync() moves them over any torch.distributed process group with torch
operations only: views of the tensors, copy_, isend and irecv of byte
buffers. Control (the plan's digest, errors, completion) goes through the
group's store, so that an error on one process reaches every other within
the timeout and nothing waits for a process that will not come.
"""

import collections
import datetime
import fnmatch
import json
import time

from . import _mdl
from ._mdl import Error

try:
    import torch
    import torch.distributed as dist
except ImportError:  # plans only
    torch = dist = None

#: What sync() did: bytes sent and received by this process, its buckets,
#: the time it took, whether every bucket's checksums matched on both ends,
#: the destination tensors written, and the derived tensors now stale.
SyncReport = collections.namedtuple(
    "SyncReport", "bytes_sent bytes_received buckets seconds verified "
    "written stale")

# Columns of the plan's tables.
_S_SRC, _S_SRCT, _S_DST, _S_DSTT, _S_PARAM, _S_BUCKET, _S_DIM0, _S_NDIM, \
    _S_SRCOFF, _S_DSTOFF, _S_BOFF, _S_ELEMS = range(12)
_B_SRC, _B_DST, _B_BYTES, _B_SEG0, _B_NSEG, _B_ROUND, _B_DSRC, _B_DDST = \
    range(8)

_TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32",
                 "F64": "float64", "I64": "int64", "I32": "int32",
                 "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                 "F8_E4M3": "uint8", "F8_E5M2": "uint8"}


def _dtype(name):
    return getattr(torch, _TORCH_DTYPES[name])


def _role(role):
    """('src' | 'dst', rank) from a role."""
    try:
        side, rank = role
    except (TypeError, ValueError):
        raise Error(f"a role is ('src', rank) or ('dst', rank), not "
                    f"{role!r}") from None
    if side not in ("src", "dst") or not isinstance(rank, int) or \
            isinstance(rank, bool):
        raise Error(f"a role is ('src', rank) or ('dst', rank), not "
                    f"{role!r}")
    return side, rank


def select_params(model, patterns):
    """The parameter paths of `model` that `patterns` (paths, or
    fnmatch patterns such as 'layers.*.mlp.*') name; each must name one."""
    if isinstance(patterns, str):
        patterns = [patterns]
    names = model.params
    chosen = set()
    for p in patterns:
        hits = fnmatch.filter(names, p)
        if not hits:
            raise Error(f"{model.name} has no parameter matching {p!r}")
        chosen.update(hits)
    return chosen


_LORA_KEYS = {"r", "names", "src_names", "dst_names", "prefix", "src_prefix",
              "dst_prefix", "dtype", "src_dtype", "dst_dtype"}


def _lora_namings(lora):
    """(r, source naming, destination naming) of a TransferPlan's `lora`:
    each naming is [A name, B name, prefix, dtype]."""
    if not isinstance(lora, dict) or not set(lora) <= _LORA_KEYS or \
            "r" not in lora:
        raise Error(f"lora takes a dict with 'r' and any of "
                    f"{sorted(_LORA_KEYS - {'r'})}, not {lora!r}")
    r = lora["r"]
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise Error(f"a LoRA rank r is a positive integer, not {r!r}")

    def naming(side):
        names = lora.get(side + "_names", lora.get("names",
                                                   ("lora_A", "lora_B")))
        if isinstance(names, str) or len(names) != 2 or \
                not all(isinstance(n, str) and n for n in names):
            raise Error(f"LoRA factor names are (A name, B name), not "
                        f"{names!r}")
        prefix = lora.get(side + "_prefix", lora.get("prefix", ""))
        dtype = lora.get(side + "_dtype", lora.get("dtype", "bf16"))
        return [names[0], names[1], str(prefix), str(dtype)]

    return r, naming("src"), naming("dst")


class TransferPlan:
    """The bytes that move from every rank of `src` to every rank of `dst`
    (each a (backend, {parallel}) pair) of one model, in buckets of at most
    `bucket_bytes`, for `dst_replicas` copies of the destination
    (data-parallel engine replicas; replica k's rank r is destination rank
    k * ranks + r), restricted to the parameters `params` names (paths or
    fnmatch patterns) when given. Built by the runtime; `digest` is the same
    on every process that builds the same plan.

    With `lora` (a dict), the plan moves LoRA adapters of rank `r` only:
    each side's tensors are the factors `<module>.<A>.weight` [r, in] and
    `<module>.<B>.weight` [out, r] of the linear weights HF-PEFT adapts, on
    that side's layout (with its LoRA modules); `names` (default
    ('lora_A', 'lora_B'); Megatron-Bridge: ('adapter.linear_in',
    'adapter.linear_out')), `prefix` (HF-PEFT: 'base_model.model.') and
    `dtype` (default 'bf16') name and store them, alike on both sides or
    apart with src_/dst_ keys. A fused module's A (an adapter trained on
    Megatron's linear_qkv) is the A of each module it fuses.
    """

    def __init__(self, config, src, dst, bucket_bytes=256 << 20,
                 params=None, dst_replicas=1, model=None, set=None,
                 choices=None, lora=None):
        from . import Model, _parallel
        self.model = Model(config=config, name=model, set=set,
                           choices=choices)
        self.src = (src[0], _parallel(dict(src[1] or {})))
        self.dst = (dst[0], _parallel(dict(dst[1] or {})))
        self.params = None if params is None else \
            select_params(self.model, params)
        if not isinstance(bucket_bytes, int) or isinstance(bucket_bytes,
                                                             bool):
            raise Error(f"bucket_bytes takes a number of bytes, not "
                        f"{bucket_bytes!r}")
        lora_rank, src_lora, dst_lora = (0, [], []) if lora is None \
            else _lora_namings(lora)
        self.lora = lora
        self._p = self.model._m.transfer_plan(
            self.src[0], self.src[1], self.dst[0], self.dst[1],
            bucket_bytes, dst_replicas, self.params, lora_rank, src_lora,
            dst_lora)
        self.segments = self._p.segments()
        self.shifts = self._p.shifts()
        self.transforms = self._p.transforms()
        self.dims = self._p.dims()
        self.buckets = self._p.buckets()
        self._schedules = {}
        self._refresh = None

    digest = property(lambda self: self._p.digest)
    num_src_ranks = property(lambda self: self._p.num_src_ranks)
    num_dst_ranks = property(lambda self: self._p.num_dst_ranks,
                             doc="Destination ranks, replicas included.")
    bucket_bytes = property(lambda self: self._p.bucket_bytes)
    param_paths = property(lambda self: self._p.params,
                           doc="The parameters segments name, by index.")

    def layout_rank(self, role):
        """The rank of its side's layout (as Model.rank_tensors and
        mdl-convert --rank number them) that a process is. A side's
        processes are the layout's ranks that hold a state, in order: where
        a backend's (tp, ep) pairs are not all processes (vLLM with expert
        parallelism, Megatron with etp < tp), process i is the i-th pair
        that is one (vLLM: its global rank)."""
        side, rank = _role(role)
        return self._p.layout_rank(side == "src", rank)

    def tensors(self, role):
        """The tensors a process reads (a source) or writes (a
        destination): [Tensor(name, shape, dtype)]."""
        from . import Tensor
        side, rank = _role(role)
        return [Tensor(*t) for t in self._p.tensors(side == "src", rank)]

    def links(self):
        """(source rank, destination rank, bytes) of every pair of ranks
        that exchange bytes."""
        return self._p.links()

    def bytes_in(self, rank):
        """The bytes destination rank `rank` receives: exactly the bytes of
        its tensors the plan writes."""
        return self._p.bytes_in(rank)

    def bytes_out(self, rank):
        """The bytes source rank `rank` sends."""
        return self._p.bytes_out(rank)

    def peak_staging(self, rank, side="dst"):
        """The staging memory a rank of a side needs (rank may be a role):
        two buffers of its largest bucket that is not sent from, or
        received into, a tensor itself."""
        if not isinstance(rank, int):
            side, rank = _role(rank)
        return self._p.peak_staging(side == "src", rank)

    def stale(self, params):
        """The destination's derived tensors computed from any of
        `params` (paths): stale once those are written."""
        return [d for d in self.model.derived(self.dst[0])
                if set(d["params"]) & set(params)]

    def refresh_plan(self):
        """The plan that recomputes the destination's derived tensors from
        each rank's own tensors (those of the synced parameters), made once.
        """
        if self._refresh is None:
            self._refresh = self.model._m.refresh_plan(
                self.dst[0], self.dst[1], self.params)
        return self._refresh

    def schedule(self, role):
        """The buckets of one process in the order it moves them: for each,
        (peer rank, bytes, direct, [_Segment]): the peer is the other
        side's rank; with `direct`, the bucket's one segment is sent from,
        or received into, its tensor itself."""
        side, rank = _role(role)
        key = (side, rank)
        if key not in self._schedules:
            self._schedules[key] = self._make_schedule(side, rank)
        return self._schedules[key]

    def _make_schedule(self, side, rank):
        source = side == "src"
        n = self.num_src_ranks if source else self.num_dst_ranks
        if rank < 0 or rank >= n:
            raise Error(f"{side} rank {rank} does not exist: the plan has "
                        f"{n}")
        b = self.buckets
        mine = b[b[:, _B_SRC if source else _B_DST] == rank].tolist()
        dims = self.dims.tolist()
        shifts = self.shifts.tolist()
        transforms = self.transforms.tolist()
        wires = {}  # destination rank -> the dtype of each of its tensors

        def wire(dst_rank, tensor):
            if dst_rank not in wires:
                wires[dst_rank] = [t[2] for t in
                                   self._p.tensors(False, dst_rank)]
            return wires[dst_rank][tensor]

        out = []
        for row in mine:
            first, count = row[_B_SEG0], row[_B_NSEG]
            items = []
            rows = self.segments[first:first + count].tolist()
            for k, s in enumerate(rows):
                d = dims[s[_S_DIM0]:s[_S_DIM0] + s[_S_NDIM]]
                dtype = wire(s[_S_DST], s[_S_DSTT])
                items.append(_Segment(
                    tensor=s[_S_SRCT] if source else s[_S_DSTT],
                    offset=s[_S_SRCOFF] if source else s[_S_DSTOFF],
                    shape=tuple(x[0] for x in d),
                    strides=tuple(x[1] if source else x[2] for x in d),
                    at=s[_S_BOFF], nbytes=s[_S_ELEMS] * _element_size(dtype),
                    wire=dtype, shift=shifts[first + k],
                    transform=transforms[first + k], param=s[_S_PARAM],
                    peer_tensor=s[_S_DSTT] if source else s[_S_SRCT]))
            out.append((row[_B_DST] if source else row[_B_SRC],
                        row[_B_BYTES],
                        bool(row[_B_DSRC] if source else row[_B_DDST]),
                        items))
        return out


#: What refresh() did: the derived tensors it recomputed, and those stale
#: that the spec cannot compute (the engine must rebuild them).
RefreshReport = collections.namedtuple("RefreshReport", "refreshed left")


def refresh(plan, state, role, stale=None):
    """Recomputes in place the derived tensors of a destination process of
    `plan` (a TransferPlan; `role` is ('dst', r)) that the spec says how to
    compute (`derived "..." = ...`), from the process's own tensors, and
    returns a RefreshReport.

    `stale` lists what to recompute: a SyncReport's `stale` (dicts) or
    names; by default every derived tensor computed from a parameter of
    the plan. `state` maps names to the engine's tensors, the derived ones
    included; those are filled in place (storage and data_ptr kept) with
    torch operations only, on whatever device they are.
    """
    if torch is None:
        raise Error("mdl.refresh needs torch")
    side, rank = _role(role)
    if side != "dst" or rank >= plan.num_dst_ranks:
        raise Error(f"mdl.refresh recomputes a destination's derived "
                    f"tensors: role {role!r} is no destination rank of the "
                    f"plan (it has {plan.num_dst_ranks})")
    if stale is None:
        stale = plan.stale(plan.param_paths)
    wanted = {d["name"] if isinstance(d, dict) else d for d in stale}
    local = plan.refresh_plan()
    me = rank % local.num_dst_ranks  # a replica's rank of one copy
    sources = local.tensors(True, me)
    targets = local.tensors(False, me)
    segments = local.segments()
    dims = local.dims().tolist()
    shifts = local.shifts().tolist()
    transforms = local.transforms().tolist()

    def flat(tensor):
        name, shape, dtype = tensor
        if name not in state:
            raise Error(f"the state has no tensor '{name}' ({list(shape)} "
                        f"{dtype}), which refreshing reads or writes")
        held = state[name]
        if list(held.shape) != list(shape) or held.dtype != _dtype(dtype):
            raise Error(f"tensor '{name}' is {list(held.shape)} "
                        f"{str(held.dtype).replace('torch.', '')}, but the "
                        f"plan has it as {list(shape)} {dtype}")
        if not held.is_contiguous():
            raise Error(f"tensor '{name}' is not contiguous")
        return held.view(-1)

    chosen = {i for i, t in enumerate(targets) if t[0] in wanted}
    rows = segments.tolist()
    for k, s in enumerate(rows):
        if s[_S_DST] != me or s[_S_DSTT] not in chosen:
            continue
        d = dims[s[_S_DIM0]:s[_S_DIM0] + s[_S_NDIM]]
        shape = tuple(x[0] for x in d)
        src, dst = flat(sources[s[_S_SRCT]]), flat(targets[s[_S_DSTT]])
        into = dst.as_strided(shape, tuple(x[2] for x in d),
                              dst.storage_offset() + s[_S_DSTOFF])
        value = src.as_strided(shape, tuple(x[1] for x in d),
                               src.storage_offset() + s[_S_SRCOFF])
        into.copy_(_moved(value, shifts[k], transforms[k]))
    refreshed = [targets[i][0] for i in sorted(chosen)]
    left = sorted(wanted - set(refreshed))
    return RefreshReport(refreshed=refreshed, left=left)


#: One segment as one side sees it: its tensor (an index into the side's
#: tensors), element offset, shape and strides there; where it sits in its
#: bucket (byte offset, bytes) and in which dtype (the destination's); the
#: value added when packing and the transform (-exp one way, log(-x) the
#: other, where one side stores -exp of the values); its parameter; the
#: other side's tensor.
_Segment = collections.namedtuple(
    "_Segment", "tensor offset shape strides at nbytes wire shift transform "
    "param peer_tensor")

# TransferSegment::Transform.
_NEG_EXP, _LOG_NEG = 1, 2


def _moved(value, shift, transform):
    """The values a segment moves, from its source's: as they are, or in
    float64 shifted or transformed (rounded once where they land)."""
    if transform == _NEG_EXP:
        return value.to(torch.float64).add_(shift).exp_().neg_()
    if transform == _LOG_NEG:
        return value.to(torch.float64).neg_().log_().add_(shift)
    return value.to(torch.float64).add_(shift) if shift else value


def _element_size(dtype):
    return {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "BF16": 2, "F16": 2,
            "I16": 2}.get(dtype, 1)

# Syncs made by this process, per plan and set of processes: every process
# of one sync counts the same, which keeps their store keys apart.
_calls = collections.Counter()


def sync(plan, state, role, group=None, src_ranks=None, dst_ranks=None,
         timeout=300.0, on_bucket=None, verify=True, store=None,
         device=None):
    """Moves the bytes of `plan` between the processes of a
    torch.distributed group and returns a SyncReport.

    Every process of the sync calls it at once with the same plan. `role`
    is ('src', r) for the process holding source rank r, whose `state` maps
    the names of that rank's tensors to its live tensors (a Megatron
    model's state_dict()), or ('dst', r) for destination rank r, whose
    `state` holds the engine's own tensors, filled in place (their storage
    and data_ptr are kept). A destination may pass state=None and
    `on_bucket`: its tensors are then allocated (on `device`, CPU by
    default) and handed over whole. `on_bucket(list of (name, tensor))`, on
    a destination, is called after each bucket with the tensors it
    completed (a tensor is never handed over in parts).

    `src_ranks[r]` and `dst_ranks[r]` are the global ranks of the processes
    holding source and destination rank r (by default the first processes
    of the default group hold the source ranks, the next ones the
    destination's). `group` is the process group the bytes go through (the
    default group when None); control (the plan's digest, errors,
    completion) goes through `store` (the default group's store when None).
    No process waits more than `timeout` seconds for another: an error on
    any process fails every process with one message naming the process
    and the tensor. With `verify`, each segment's checksum (the wrapping
    int64 sum of the bucket's 8-byte words it touches) is compared between
    both ends.
    """
    if dist is None:
        raise Error("mdl.sync needs torch")
    return _Sync(plan, state, role, group, src_ranks, dst_ranks, timeout,
                 on_bucket, verify, store, device).run()


class _Failure(Exception):
    """An error of this process, already published to the others."""


class _Sync:
    def __init__(self, plan, state, role, group, src_ranks, dst_ranks,
                 timeout, on_bucket, verify, store, device):
        self.plan = plan
        self.state = state
        self.side, self.rank = _role(role)
        self.source = self.side == "src"
        self.group = group
        self.timeout = float(timeout)
        self.on_bucket = on_bucket
        self.verify = verify
        self.store = store
        self.device = device
        self.src_ranks, self.dst_ranks = src_ranks, dst_ranks
        self.error = None     # the first error of this process
        self.draining = False  # after an error: move bytes, write nothing
        self.dead = set()     # peers whose connection was lost
        self.written = []     # destination tensors written, in order
        self.buffers = [None, None]

    # Names and messages.

    def who(self, side, rank):
        ranks = self.src_ranks if side == "src" else self.dst_ranks
        return f"{side} {rank} (process {ranks[rank]})"

    @property
    def me(self):
        return self.who(self.side, self.rank)

    def peer(self, rank):
        return self.who("dst" if self.source else "src", rank)

    def tensor_names(self, segments, limit=3):
        names = []
        for seg in segments:
            name = self.tensors[seg.tensor].name
            if name not in names:
                names.append(name)
        more = f" and {len(names) - limit} more" if len(names) > limit \
            else ""
        return ", ".join(f"'{n}'" for n in names[:limit]) + more

    # The store: hello, errors, completion.

    def key(self, name):
        return self.prefix + name

    def publish(self, message):
        """Records this process's first error and tells every process."""
        if self.error is None:
            self.error = message
            self.store.compare_set(self.key("error"), "", message)
            self.store.add(self.key("errors"), 1)
        self.draining = True

    def others_failed(self):
        return self.store.add(self.key("errors"), 0) > 0

    def first_error(self):
        return self.store.get(self.key("error")).decode()

    def missing(self, name, timeout):
        """Waits up to `timeout` seconds for every process's key `name`/P;
        the processes whose key is still missing then, as a message, or
        None."""
        keys = [self.key(f"{name}/{p}") for p in self.processes]
        try:
            self.store.wait(keys, datetime.timedelta(seconds=timeout))
            return None
        except RuntimeError:
            pass
        late = []
        for k, who in zip(keys, self.everyone):
            try:
                self.store.wait([k], datetime.timedelta(milliseconds=10))
            except RuntimeError:
                late.append(who)
        verb = "join the sync" if name == "hello" else "finish"
        return (f"{self.me}: " + ", ".join(late) +
                f" did not {verb} within {self.timeout:g} s")

    # Checks before anything moves.

    def setup(self):
        """Resolves ranks, the store and the tensors; returns a message
        when something is wrong here (the others hear of it before any
        byte moves)."""
        plan = self.plan
        nsrc, ndst = plan.num_src_ranks, plan.num_dst_ranks
        if self.src_ranks is None and self.dst_ranks is None and \
                self.group is None:
            self.src_ranks = list(range(nsrc))
            self.dst_ranks = list(range(nsrc, nsrc + ndst))
        if self.src_ranks is None or self.dst_ranks is None:
            raise Error("give both src_ranks and dst_ranks (the global ranks "
                        "of the processes holding each source and "
                        "destination rank)")
        self.src_ranks = [int(r) for r in self.src_ranks]
        self.dst_ranks = [int(r) for r in self.dst_ranks]
        if len(self.src_ranks) != nsrc or len(self.dst_ranks) != ndst:
            raise Error(f"the plan has {nsrc} source and {ndst} destination "
                        f"ranks, but src_ranks names {len(self.src_ranks)} "
                        f"processes and dst_ranks {len(self.dst_ranks)}")
        everyone = self.src_ranks + self.dst_ranks
        if len(set(everyone)) != len(everyone):
            raise Error("src_ranks and dst_ranks name a process twice: "
                        f"{everyone}")
        n = nsrc if self.source else ndst
        if self.rank < 0 or self.rank >= n:
            raise Error(f"{self.side} rank {self.rank} does not exist: the "
                        f"plan has {n}")
        if not dist.is_initialized():
            raise Error("mdl.sync needs torch.distributed initialized "
                        "(init_process_group)")
        if self.store is None:
            self.store = dist.distributed_c10d._get_default_store()
        self.everyone = [self.who("src", r) for r in range(nsrc)] + \
            [self.who("dst", r) for r in range(ndst)]
        self.processes = everyone
        # Processes that disagree on the plan still meet at these keys.
        key = tuple(everyone)
        _calls[key] += 1
        self.prefix = "mdl-sync/" + ",".join(map(str, everyone)) + \
            f"/{_calls[key]}/"
        self.index = self.rank if self.source else nsrc + self.rank
        me = (self.src_ranks if self.source else self.dst_ranks)[self.rank]
        if dist.get_rank() != me:
            return (f"{self.me}: this process is process "
                    f"{dist.get_rank()} of the group, not {me}")
        try:
            self.bind_tensors()
        except Error as e:
            return f"{self.me}: {e}"
        return None

    def bind_tensors(self):
        """The flat tensors of this process, by the plan's index."""
        self.tensors = self.plan.tensors((self.side, self.rank))
        self.flat = [None] * len(self.tensors)
        self.schedule = self.plan.schedule((self.side, self.rank))
        state = self.state
        if state is None:
            if self.source or self.on_bucket is None:
                raise Error("no state is given" +
                            ("" if self.source else
                             " (a destination without one needs on_bucket)"))
            self.device = torch.device(self.device or "cpu")
            return
        devices = set()
        for i, t in enumerate(self.tensors):
            if t.name not in state:
                raise Error(f"the state has no tensor '{t.name}' "
                            f"({list(t.shape)} {t.dtype}), which the plan "
                            + ("reads" if self.source else "writes"))
            held = state[t.name]
            if not isinstance(held, torch.Tensor):
                raise Error(f"'{t.name}' is a {type(held).__name__}, not a "
                            "torch tensor")
            if list(held.shape) != list(t.shape) or \
                    held.dtype != _dtype(t.dtype):
                raise Error(f"tensor '{t.name}' is {list(held.shape)} "
                            f"{str(held.dtype).replace('torch.', '')}, but "
                            f"the plan has it as {list(t.shape)} {t.dtype}")
            if not held.is_contiguous():
                if not self.source:
                    raise Error(f"tensor '{t.name}' is not contiguous, so it "
                                "cannot be filled in place")
                held = held.contiguous()
            devices.add(held.device)
            self.flat[i] = held.reshape(-1)
        if len(devices) > 1:
            raise Error("the state's tensors are on several devices: " +
                        ", ".join(sorted(str(d) for d in devices)))
        self.device = torch.device(self.device) if self.device else \
            (devices.pop() if devices else torch.device("cpu"))

    def hello(self, problem):
        """Every process says which plan it holds and whether it is ready;
        any problem fails every process before a byte moves."""
        me = self.index
        self.store.set(self.key(f"hello/{self.processes[me]}"), json.dumps(
            {"digest": self.plan.digest, "problem": problem}))
        late = self.missing("hello", self.timeout)
        if late:
            raise Error(f"mdl.sync failed on {late}")
        said = [json.loads(self.store.get(self.key(f"hello/{p}")))
                for p in self.processes]
        # Every process compares with the first, so all say the same.
        first = said[0]["digest"]
        for who, s in zip(self.everyone, said):
            if s["digest"] != first:
                raise Error(
                    f"mdl.sync failed: {self.everyone[0]} holds plan "
                    f"{first} but {who} holds plan {s['digest']}:"
                    " every process must build the same plan (model, config,"
                    " layouts, bucket_bytes, params, replicas)")
        for s in said:
            if s["problem"]:
                raise Error(f"mdl.sync failed on {s['problem']}")

    # Moving the bytes.

    def buffer(self, k, nbytes):
        b = self.buffers[k]
        if b is None or b.numel() < nbytes:
            b = self.buffers[k] = torch.empty(
                max(nbytes, 0 if b is None else b.numel()),
                dtype=torch.uint8, device=self.device)
        return b[:nbytes]

    def view(self, seg):
        """The segment's elements in this process's tensor."""
        flat = self.flat[seg.tensor]
        if flat is None:  # a destination tensor allocated on first use
            t = self.tensors[seg.tensor]
            flat = self.flat[seg.tensor] = torch.empty(
                t.shape, dtype=_dtype(t.dtype), device=self.device).view(-1)
        return flat.as_strided(seg.shape, seg.strides,
                               flat.storage_offset() + seg.offset)

    @staticmethod
    def slot(buf, seg):
        """The segment's place in a bucket, as its dtype and shape."""
        return buf[seg.at:seg.at + seg.nbytes].view(_dtype(seg.wire)).view(
            seg.shape)

    @staticmethod
    def checksums(data, segments):
        """The checksum of each segment of a bucket (`data`, its bytes):
        the sum, as int64 that wraps, of the 8-byte words of the bucket
        (counted from its start, the last one zero-padded) that the
        segment's bytes touch. Both ends lay a bucket out alike, so they
        agree; a corrupted byte changes the sum of each segment whose words
        hold it. Whole words sum at memory speed, where a sum widening
        2-byte elements ran at a tenth of it."""
        n = data.numel()
        full = n // 8 * 8
        body = data[:full]
        if body.storage_offset() % 8:  # a view of int64 must be aligned
            body = body.clone()
        words = body.view(torch.int64)
        count = words.numel()
        tail = None
        if full < n:
            tail = torch.zeros(8, dtype=torch.uint8, device=data.device)
            tail[:n - full] = data[full:]
            tail = tail.view(torch.int64)[0]
        out = []
        for seg in segments:
            lo, hi = seg.at // 8, (seg.at + seg.nbytes + 7) // 8
            total = words[lo:min(hi, count)].sum()
            if hi > count:
                total = total + tail
            out.append(total)
        return out

    def direct(self, seg):
        """The bytes of a segment that is one contiguous run of its
        tensor."""
        return self.view(seg).reshape(-1).view(torch.uint8)

    def pack(self, segments, buf):
        for seg in segments:
            src = self.view(seg)
            slot = self.slot(buf, seg)
            slot.copy_(_moved(src, seg.shift, seg.transform))

    def unpack(self, segments, buf):
        for seg in segments:
            self.view(seg).copy_(self.slot(buf, seg))

    def wait(self, work, what, peer, segments):
        """Waits for one send or receive; an error or a timeout fails this
        process (and, through the store, every other)."""
        try:
            work.wait(datetime.timedelta(seconds=self.timeout))
            return True
        except RuntimeError as e:
            text = str(e).strip().splitlines()[-1] if str(e).strip() else \
                type(e).__name__
            self.dead.add(peer)
            self.publish(f"{self.me}: {what} {self.peer(peer)} failed "
                         f"(tensor {self.tensor_names(segments)}): {text}")
            return False

    def post(self, op, data, peer):
        ranks = self.dst_ranks if self.source else self.src_ranks
        return op(data, ranks[peer], group=self.group)

    def send_all(self):
        sums = collections.defaultdict(list)
        inflight = collections.deque()  # (work, peer, segments, buffer)
        busy = [None, None]             # the work using each buffer
        k = 0
        for i, (peer, nbytes, direct, segments) in enumerate(self.schedule):
            if not self.draining and self.others_failed():
                self.draining = True
            if peer in self.dead:
                continue
            if direct and not self.draining:
                data, used = self.direct(segments[0]), None
            else:
                used = k
                k = 1 - k
                if busy[used] is not None:
                    self.finish_send(inflight, busy, until=busy[used])
                data = self.buffer(used, nbytes)
                if not self.draining:
                    try:
                        self.pack(segments, data)
                    except Exception as e:  # a device error, memory
                        self.publish(f"{self.me}: packing tensor "
                                     f"{self.tensor_names(segments)} "
                                     f"failed: {e}")
            if self.verify and not self.draining:
                sums[peer].extend(self.checksums(data, segments))
            work = self.post(dist.isend, data, peer)
            entry = (work, peer, segments, used)
            inflight.append(entry)
            if used is not None:
                busy[used] = entry
            self.sent += nbytes
            self.buckets += 1
        self.finish_send(inflight, busy)
        return sums

    def finish_send(self, inflight, busy, until=None):
        while inflight:
            entry = inflight.popleft()
            work, peer, segments, used = entry
            self.wait(work, "sending to", peer, segments)
            if used is not None and busy[used] is entry:
                busy[used] = None
            if entry is until:
                return

    def receive_all(self):
        sums = collections.defaultdict(list)
        schedule = self.schedule
        remaining = self.expected_bytes()
        posted = collections.deque()  # (index, work, buffer or None)
        free = [0, 1]
        nxt = 0
        while nxt < len(schedule) or posted:
            while nxt < len(schedule) and len(posted) < 2:
                peer, nbytes, direct, segments = schedule[nxt]
                if not self.draining and self.others_failed():
                    self.draining = True
                if peer in self.dead:
                    nxt += 1
                    continue
                if direct and not self.draining:
                    data, used = self.direct(segments[0]), None
                    self.mark_written(segments)
                else:
                    used = free.pop()
                    data = self.buffer(used, nbytes)
                work = self.post(dist.irecv, data, peer)
                posted.append((nxt, work, data, used))
                nxt += 1
            if not posted:
                break
            i, work, data, used = posted.popleft()
            peer, nbytes, direct, segments = schedule[i]
            ok = self.wait(work, "receiving from", peer, segments)
            if ok:
                self.received += nbytes
                self.buckets += 1
                if self.verify:
                    sums[peer].extend(self.checksums(data, segments))
                if not self.draining and used is not None:
                    try:
                        self.unpack(segments, data)
                        self.mark_written(segments)
                    except Exception as e:
                        self.publish(f"{self.me}: writing tensor "
                                     f"{self.tensor_names(segments)} "
                                     f"failed: {e}")
                if not self.draining:
                    self.hand_over(segments, remaining)
            if used is not None:
                free.append(used)
        return sums

    def expected_bytes(self):
        """Per destination tensor, the bytes still to come."""
        left = collections.Counter()
        for _, _, _, segments in self.schedule:
            for seg in segments:
                left[seg.tensor] += seg.nbytes
        return left

    def mark_written(self, segments):
        for seg in segments:
            self.params_written.add(seg.param)
            name = self.tensors[seg.tensor].name
            if not self.written or self.written[-1] != name:
                if name not in self.written_set:
                    self.written_set.add(name)
                    self.written.append(name)

    def hand_over(self, segments, remaining):
        """Gives on_bucket the tensors this bucket completed."""
        done = []
        for seg in segments:
            remaining[seg.tensor] -= seg.nbytes
            if remaining[seg.tensor] == 0:
                done.append(seg.tensor)
        if not done or self.on_bucket is None:
            return
        t = self.tensors
        out = [(t[i].name, self.flat[i].view(t[i].shape)) for i in done]
        if self.state is None:
            for i in done:
                self.flat[i] = None
        try:
            self.on_bucket(out)
        except Exception as e:
            self.publish(f"{self.me}: on_bucket raised "
                         f"{type(e).__name__}: {e} (with tensor "
                         f"'{out[0][0]}')")

    def compare(self, sums):
        """Sends this side's checksums to each peer destination, or checks
        each peer source's against this side's; a mismatch names its
        tensor. Both sides exchange them whatever happened before (a
        process that stopped writing still answers), so none waits."""
        segments = collections.defaultdict(list)
        for peer, _, _, segs in self.schedule:
            segments[peer].extend(segs)
        zero = torch.zeros((), dtype=torch.int64, device=self.device)
        works = []
        for peer in sorted(segments):
            if peer in self.dead:
                continue
            n = len(segments[peer])
            if self.source:
                mine = sums[peer] + [zero] * (n - len(sums[peer]))
                data = torch.stack(mine).to(self.device)
                op = dist.isend
            else:
                data = torch.empty(n, dtype=torch.int64, device=self.device)
                op = dist.irecv
            works.append((self.post(op, data, peer), peer, data))
        ok = True
        for work, peer, data in works:
            what = "sending checksums to" if self.source else \
                "receiving checksums from"
            if not self.wait(work, what, peer, []):
                ok = False
            elif not self.source and not self.draining:
                ok = self.check(peer, segments[peer], sums[peer], data) and ok
        return ok and not self.draining

    def check(self, peer, segments, sums, sent):
        if len(sums) != len(segments):
            return False  # some buckets did not arrive
        got = torch.stack(sums).to(self.device)
        bad = torch.nonzero(got != sent).reshape(-1).tolist()
        if not bad:
            return True
        seg = segments[bad[0]]
        self.publish(
            f"{self.me}: tensor '{self.tensors[seg.tensor].name}' "
            f"({self.plan.param_paths[seg.param]}) from {self.peer(peer)} "
            f"arrived corrupted: checksum {int(got[bad[0]])} here, "
            f"{int(sent[bad[0]])} sent" +
            (f" ({len(bad)} segments differ)" if len(bad) > 1 else ""))
        return False

    def finish(self):
        """Waits until every process is done or one failed."""
        self.store.add(self.key("done"), 1)
        self.store.set(self.key(f"done/{dist.get_rank()}"), "1")
        deadline = time.monotonic() + self.timeout
        n = len(self.processes)
        while True:
            if self.others_failed():
                return self.first_error()
            if self.store.add(self.key("done"), 0) >= n:
                # A failing process publishes its error before it is done:
                # one published between the two reads above is seen here.
                return self.first_error() if self.others_failed() else None
            if time.monotonic() > deadline:
                return self.missing("done", 0)
            time.sleep(0.002)

    def leave(self):
        """The last process to leave removes the sync's keys."""
        if self.store.add(self.key("left"), 1) < len(self.processes):
            return
        for k in [f"hello/{p}" for p in self.processes] + \
                [f"done/{p}" for p in self.processes] + \
                ["error", "errors", "done", "left"]:
            try:
                self.store.delete_key(self.key(k))
            except RuntimeError:
                pass

    def run(self):
        start = time.monotonic()
        self.sent = self.received = self.buckets = 0
        self.written_set = set()
        self.params_written = set()
        problem = self.setup()
        self.hello(problem)
        try:
            sums = self.send_all() if self.source else self.receive_all()
            verified = self.compare(sums) if self.verify else False
        except Exception as e:  # anything else: the others must hear it
            self.publish(f"{self.me}: {type(e).__name__}: {e}")
            verified = False
        error = self.finish()
        self.leave()
        if error:
            text = f"mdl.sync failed on {error}"
            if self.written:
                text += (f"; this process ({self.me}) had written "
                         f"{len(self.written)} tensors, which may now hold "
                         f"old and new weights: " +
                         self.tensor_list(self.written))
            raise Error(text)
        return SyncReport(bytes_sent=self.sent, bytes_received=self.received,
                          buckets=self.buckets,
                          seconds=time.monotonic() - start,
                          verified=bool(verified and self.verify),
                          written=list(self.written),
                          stale=[] if self.source else self.plan.stale(
                              {self.plan.param_paths[p]
                               for p in self.params_written}))

    @staticmethod
    def tensor_list(names, limit=5):
        shown = ", ".join(f"'{n}'" for n in names[:limit])
        return shown + (f" and {len(names) - limit} more"
                        if len(names) > limit else "")
