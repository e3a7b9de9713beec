"""ndarray of the simulated device and the one way an operation is launched
(`launch`): computed on the logical values now, queued for device memory."""
import operator

import numpy as np

from . import device


def _is(a):
    return isinstance(a, ndarray)


def _tree(value, attr):
    if isinstance(value, ndarray):
        return getattr(value, attr)
    if isinstance(value, (list, tuple)):
        return type(value)(_tree(v, attr) for v in value)
    if isinstance(value, dict):
        return {k: _tree(v, attr) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        raise TypeError("simcupy: a NumPy array passed to a device operation "
                        "(CuPy does not convert host arrays implicitly)")
    return value


def _arrays(value):
    if isinstance(value, ndarray):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _arrays(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _arrays(v)


def _has_array(value):
    return next(_arrays(value), None) is not None


def launch(fn, *args, **kwargs):
    """fn over device arrays: shapes now, device memory when the stream runs.
    A result that is a view of an argument is a view on the device too. Every
    array must live on the current device (device.py)."""
    for a in _arrays((args, kwargs)):
        device.check_device(a._device_id)
    log = fn(*_tree(args, "_log"), **_tree(kwargs, "_log"))
    phys_args, phys_kwargs = _tree(args, "_phys"), _tree(kwargs, "_phys")
    out = kwargs.get("out")
    if isinstance(out, tuple):
        out = out[0] if len(out) == 1 else out
    if _is(out):
        device.enqueue(lambda: fn(*phys_args, **phys_kwargs))
        return out
    if log is None:                      # an in-place method (fill, sort)
        device.enqueue(lambda: fn(*phys_args, **phys_kwargs))
        return None
    if isinstance(log, np.ndarray):
        for a in _arrays((args, kwargs)):
            if np.may_share_memory(log, a._log):    # a view: no data moves
                return ndarray(log, fn(*phys_args, **phys_kwargs), base=a)
    if isinstance(log, (np.ndarray, np.generic)) or (
            isinstance(log, (bool, int, float, complex)) and _has_array((args, kwargs))):
        log = np.asarray(log)
        result = ndarray(log, device.poisoned(log))
        device.enqueue(lambda: _assign(result._phys, fn(*phys_args, **phys_kwargs)))
        return result
    if isinstance(log, tuple) and log and all(isinstance(x, np.ndarray) for x in log):
        results = tuple(ndarray(x, device.poisoned(x)) for x in log)

        def run():
            for r, value in zip(results, fn(*phys_args, **phys_kwargs)):
                _assign(r._phys, value)
        device.enqueue(run)
        return results
    return log


def _assign(target, value):
    target[...] = value


class _Pointer:
    def __init__(self, array):
        self.ptr = array.__array_interface__["data"][0]


class ndarray:
    """A device array: `_phys` is its memory, `_log` its shape carrier."""

    __array_priority__ = 100

    def __init__(self, log, phys, base=None):
        self._log, self._phys = log, phys
        self._base = None if base is None else (base if base._base is None else base._base)
        self._device_id = device.current_device() if base is None else base._device_id

    # metadata -----------------------------------------------------------------------
    shape = property(lambda self: self._phys.shape)
    dtype = property(lambda self: self._phys.dtype)
    size = property(lambda self: self._phys.size)
    ndim = property(lambda self: self._phys.ndim)
    nbytes = property(lambda self: self._phys.nbytes)
    itemsize = property(lambda self: self._phys.itemsize)
    strides = property(lambda self: self._phys.strides)
    flags = property(lambda self: self._phys.flags)
    base = property(lambda self: self._base)
    data = property(lambda self: _Pointer(self._phys))
    T = property(lambda self: launch(lambda a: a.T, self))
    device = property(lambda self: Device(self._device_id))

    def __len__(self):
        return len(self._phys)

    @property
    def __cuda_array_interface__(self):
        """Device memory as MPI sees it: exactly as it is, queued work not run;
        only a CUDA-aware MPI may have it (device.hand_to_mpi)."""
        device.hand_to_mpi("__cuda_array_interface__")
        p = self._phys
        return {"shape": p.shape, "typestr": p.dtype.str, "version": 2,
                "data": (p.__array_interface__["data"][0], False),
                "strides": None if p.flags.c_contiguous else p.strides}

    def __dlpack_device__(self):
        return (2, self._device_id)         # kDLCUDA: what CuPy answers

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """The path mpi4py tries first, and torch.from_dlpack takes. mpi4py
        asks with stream=-1 (no synchronization: MPI reads the memory as it
        is), so only a CUDA-aware MPI may; a consumer naming its stream
        (torch) gets the memory once the work queued on it is done, as the
        DLPack protocol has the producer order it."""
        if stream == -1:
            device.hand_to_mpi("DLPack")
        else:
            self._stream(None).synchronize()
        kwargs = {} if max_version is None else {"max_version": max_version}
        return self._phys.__dlpack__(**kwargs)

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed "
                        "(simcupy, like CuPy: call .get())")

    # host <-> device ----------------------------------------------------------------
    def _stream(self, stream):
        """`stream`, or the current stream of the array's device (CuPy
        copies under `with self.device`); a stream of another device is an
        error, as in CUDA."""
        if stream is None:
            return device._state.on(self._device_id).current
        if stream.device_id != self._device_id:
            raise device.PeerAccessError("a copy of an array of device %d on a stream of "
                                         "device %d" % (self._device_id, stream.device_id))
        return stream

    def get(self, stream=None, order="C", out=None, blocking=True):
        if stream is None:             # CuPy: the current stream, then wait
            self._stream(None).synchronize()
            if out is None:
                return self._phys.copy(order=order)
            out[...] = self._phys
            return out
        stream = self._stream(stream)
        out = out if out is not None else np.empty(self.shape, self.dtype)
        phys = self._phys
        stream._enqueue(lambda: _assign(out, phys))
        return out

    def set(self, arr, stream=None):
        stream = self._stream(stream)
        source = arr if device.is_pinned(arr) else np.array(arr)  # pageable: copied now
        phys = self._phys
        self._log[...] = arr
        stream._enqueue(lambda: _assign(phys, source))

    def _read(self):
        self._stream(None).synchronize()
        return self._phys

    def __float__(self):
        return float(self._read())

    def __int__(self):
        return int(self._read())

    def __index__(self):
        return operator.index(self._read()[()])

    def __bool__(self):
        return bool(self._read())

    def item(self):
        return self._read().item()

    def tolist(self):
        return self._read().tolist()

    def __repr__(self):
        return "simcupy." + repr(self._read())

    __str__ = __repr__

    # indexing -----------------------------------------------------------------------
    def __getitem__(self, index):
        if not _has_array(index):          # host indices travel with the launch
            return launch(lambda a: a[index], self)
        return launch(operator.getitem, self, index)

    def __setitem__(self, index, value):
        if isinstance(value, np.ndarray):    # CuPy copies host values at the call
            value = np.array(value)
            self._log[_tree(index, "_log")] = value
            phys, idx = self._phys, _tree(index, "_phys")
            device.enqueue(lambda: phys.__setitem__(idx, value))
            return
        if not _has_array(index):
            launch(lambda a, v: a.__setitem__(index, v), self, value)
        else:
            launch(operator.setitem, self, index, value)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # every other method: NumPy's, launched ----------------------------------------------
    def __getattr__(self, name):
        if name.startswith("__") or not hasattr(np.ndarray, name):
            raise AttributeError(name)

        def method(*args, **kwargs):
            return launch(lambda a, *r, **k: getattr(a, name)(*r, **k), self, *args, **kwargs)
        return method

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            return NotImplemented
        inputs = tuple(_device_scalar(x) for x in inputs)
        return launch(ufunc, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return launch(func, *args, **kwargs)


def _device_scalar(x):
    return x[()] if isinstance(x, np.ndarray) and x.ndim == 0 else x


def _binary(ufunc):
    def forward(a, b):
        return launch(ufunc, a, b)

    def reverse(a, b):
        return launch(ufunc, b, a)

    def inplace(a, b):
        return launch(ufunc, a, b, out=a)
    return forward, reverse, inplace


for _name, _ufunc in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                      ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                      ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul),
                      ("and", np.bitwise_and), ("or", np.bitwise_or),
                      ("xor", np.bitwise_xor)]:
    _f, _r, _i = _binary(_ufunc)
    setattr(ndarray, "__%s__" % _name, _f)
    setattr(ndarray, "__r%s__" % _name, _r)
    setattr(ndarray, "__i%s__" % _name, _i)
for _name, _ufunc in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                      ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(ndarray, "__%s__" % _name, _binary(_ufunc)[0])
ndarray.__neg__ = lambda a: launch(np.negative, a)
ndarray.__pos__ = lambda a: launch(np.positive, a)
ndarray.__abs__ = lambda a: launch(np.absolute, a)
ndarray.__invert__ = lambda a: launch(np.invert, a)
ndarray.__hash__ = None


class Device:
    def __init__(self, device_id=None):
        self.id = device.current_device() if device_id is None else int(device_id)

    def use(self):
        device.use_device(self.id)
        return self

    def synchronize(self):
        device.synchronize_all(self.id)

    @property
    def pci_bus_id(self):
        return device.pci_bus_id(self.id)

    def __enter__(self):
        device._state.device_stack.append(device.current_device())
        device.use_device(self.id)
        return self

    def __exit__(self, *exc):
        device.use_device(device._state.device_stack.pop())

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return "<CUDA Device %d>" % self.id
