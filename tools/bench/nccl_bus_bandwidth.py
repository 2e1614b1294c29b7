#!/usr/bin/env python3
"""NCCL allreduce bandwidth through dpl's nccl backend plugin at world size 1, in one process with
the pip torch whose libnccl.so.2 the plugin must share.

The plugin is loaded with ctypes after `import torch` and driven through its ABI v4 table as the
host drives it: rank 0 of 1 with an in-process store, float32 sum allreduces on torch's current
stream, then one synchronize. For each size (8 B to --max-bytes, doubling) CUDA events on that
stream time --iters calls after --warmup. The same allreduce through torch.distributed (NCCL,
world size 1) is the reference. Figures as nccl-tests reports them: algbw = bytes / time and
busbw = algbw * 2(n-1)/n, which is 0 at n = 1 (no byte crosses a link); at world size 1 the time
per call is what tells: the plugin's event, stream wait and launch on top of NCCL's own kernel.
It also checks that one libnccl.so.2 is mapped in the process and that the sums are right.
"""
import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

c_int, c_int32, c_uint8, c_uint16 = ctypes.c_int, ctypes.c_int32, ctypes.c_uint8, ctypes.c_uint16
c_uint32, c_int64, c_uint64 = ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
c_void_p, c_char_p, POINTER, CFUNCTYPE = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER, ctypes.CFUNCTYPE

DPL_OK, DPL_ERR_NOT_FOUND, DPL_ERR_BUFFER_TOO_SMALL = 0, 8, 7
DPL_PLUGIN_MAGIC, DPL_REDUCE_SUM, KDL_CUDA, KDL_FLOAT = 0x504C5044, 0, 2, 2
WORLD_SIZE = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)),
                ("byte_offset", c_uint64)]


STORE_SET = CFUNCTYPE(c_int, c_void_p, c_char_p, c_void_p, c_uint64)
STORE_GET = CFUNCTYPE(c_int, c_void_p, c_char_p, c_void_p, c_uint64, POINTER(c_uint64), c_int64)
STORE_WAIT = CFUNCTYPE(c_int, c_void_p, POINTER(c_char_p), c_uint32, c_int64)
STORE_ADD = CFUNCTYPE(c_int, c_void_p, c_char_p, c_int64, POINTER(c_int64))
STORE_LAST_ERROR = CFUNCTYPE(c_void_p, c_void_p)  # a pointer this script keeps alive


class Store(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("version", c_uint32), ("context", c_void_p),
                ("set", STORE_SET), ("get", STORE_GET), ("wait", STORE_WAIT), ("add", STORE_ADD),
                ("last_error", STORE_LAST_ERROR)]


LOG = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


class Config(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("version", c_uint32), ("rank", c_int32),
                ("world_size", c_int32), ("local_rank", c_int32), ("local_world_size", c_int32),
                ("device_type", c_int32), ("device_id", c_int32), ("timeout_ms", c_int64),
                ("store", POINTER(Store)), ("log", LOG), ("log_context", c_void_p),
                ("options", c_char_p), ("local_address", c_char_p)]  # backend ABI v2 to v4


class Header(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("magic", c_uint32), ("kind", c_uint32),
                ("abi_version", c_uint32), ("name", c_char_p), ("version", c_char_p),
                ("description", c_char_p)]


class PluginV4(ctypes.Structure):
    _fields_ = [("header", Header),
                ("create", CFUNCTYPE(c_int, POINTER(Config), POINTER(c_void_p))),
                ("destroy", CFUNCTYPE(None, c_void_p)),
                ("allreduce", CFUNCTYPE(c_int, c_void_p, POINTER(DLTensor), c_int, c_void_p)),
                ("broadcast", CFUNCTYPE(c_int, c_void_p, POINTER(DLTensor), c_int32, c_void_p)),
                ("allgather", CFUNCTYPE(c_int, c_void_p, POINTER(DLTensor), POINTER(DLTensor),
                                        c_void_p)),
                ("barrier", CFUNCTYPE(c_int, c_void_p)),
                ("last_error", CFUNCTYPE(c_char_p)),
                ("synchronize", CFUNCTYPE(c_int, c_void_p, c_void_p)),
                ("reduce_scatter", CFUNCTYPE(c_int, c_void_p, POINTER(DLTensor), POINTER(DLTensor),
                                             c_int, c_void_p)),
                ("abort", CFUNCTYPE(c_int, c_void_p))]


class MemoryStore:
    """The dpl_store_v1 of a job of one process: a dict."""

    def __init__(self):
        self.values = {}
        self.error = ctypes.create_string_buffer(b"key not found", 64)
        self.callbacks = (STORE_SET(self._set), STORE_GET(self._get), STORE_WAIT(self._wait),
                          STORE_ADD(self._add), STORE_LAST_ERROR(lambda _: ctypes.addressof(self.error)))
        self.view = Store(ctypes.sizeof(Store), 1, None, *self.callbacks)

    def _set(self, _, key, value, size):
        self.values[key] = ctypes.string_at(value, size) if size else b""
        return DPL_OK

    def _get(self, _, key, buffer, capacity, size, timeout_ms):
        if key not in self.values:
            return DPL_ERR_NOT_FOUND
        value = self.values[key]
        size[0] = len(value)
        if len(value) > capacity:
            return DPL_ERR_BUFFER_TOO_SMALL
        ctypes.memmove(buffer, value, len(value))
        return DPL_OK

    def _wait(self, _, keys, count, timeout_ms):
        return DPL_OK if all(keys[i] in self.values for i in range(count)) else DPL_ERR_NOT_FOUND

    def _add(self, _, key, delta, result):
        value = int(self.values.get(key, b"0")) + delta
        self.values[key] = str(value).encode()
        result[0] = value
        return DPL_OK


def mapped_libraries(stem):
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith(stem):
                paths.add(os.path.realpath(path))
    return sorted(paths)


def tensor_view(x, shape):
    return DLTensor(x.data_ptr(), DLDevice(KDL_CUDA, x.device.index), 1, DLDataType(KDL_FLOAT, 32, 1),
                    shape, None, 0)


def time_calls(call, stream, warmup, iters, finish):
    for _ in range(warmup):
        call()
    finish()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(iters):
        call()
    finish()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / iters  # seconds per call


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plugin", required=True, help="libdpl_backend_nccl.so")
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("nccl_bus_bandwidth: torch sees no CUDA device")
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")  # libtorch_cuda and its libnccl.so.2 are loaded by now
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL as torch reports it: "
          f"{'.'.join(map(str, torch.cuda.nccl.version()))}, {torch.cuda.get_device_name(0)}")

    library = ctypes.CDLL(args.plugin, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    table = PluginV4.in_dll(library, "dpl_backend_plugin_v4")
    if (table.header.magic, table.header.abi_version, table.header.struct_size) != (
            DPL_PLUGIN_MAGIC, 4, ctypes.sizeof(PluginV4)):
        sys.exit(f"nccl_bus_bandwidth: {args.plugin} has no backend ABI v4 table of this layout")
    nccls = mapped_libraries("libnccl.so")
    print(f"libnccl mapped in this process: {', '.join(nccls) or 'none'}")
    if len(nccls) != 1:
        sys.exit("nccl_bus_bandwidth: FAIL: not exactly one libnccl.so.2 in the process")

    store = MemoryStore()
    messages = []
    log = LOG(lambda _, level, text: messages.append(text.decode(errors="replace")))
    config = Config(ctypes.sizeof(Config), 4, 0, WORLD_SIZE, 0, WORLD_SIZE, KDL_CUDA, 0, 60000,
                    ctypes.pointer(store.view), log, None, b"", b"127.0.0.1")
    backend = c_void_p()
    if table.create(ctypes.byref(config), ctypes.byref(backend)) != DPL_OK:
        sys.exit(f"nccl_bus_bandwidth: create failed: {table.last_error().decode()}")
    for message in messages:
        print(f"plugin: {message}")

    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=WORLD_SIZE,
                            device_id=torch.device("cuda", 0))
    stream = torch.cuda.current_stream()
    print("| bytes | dpl us/call | dpl algbw GB/s | dpl busbw GB/s | torch us/call | "
          "torch algbw GB/s |")
    print("|---|---|---|---|---|---|")
    size, failures = 8, 0
    while size <= args.max_bytes:
        count = size // 4
        x = torch.ones(count, device="cuda", dtype=torch.float32)
        shape = c_int64(count)
        view = tensor_view(x, ctypes.pointer(shape))

        def dpl_call():
            status = table.allreduce(backend, ctypes.byref(view), DPL_REDUCE_SUM, stream.cuda_stream)
            if status != DPL_OK:
                sys.exit(f"nccl_bus_bandwidth: allreduce failed: {table.last_error().decode()}")

        def dpl_finish():
            if table.synchronize(backend, stream.cuda_stream) != DPL_OK:
                sys.exit(f"nccl_bus_bandwidth: synchronize failed: {table.last_error().decode()}")

        dpl_seconds = time_calls(dpl_call, stream, args.warmup, args.iters, dpl_finish)
        if not bool((x == 1).all()):  # a sum over one rank keeps the ones
            failures += 1
            print(f"FAIL: {size} bytes: the dpl allreduce changed the data")
        torch_seconds = time_calls(lambda: dist.all_reduce(x), stream, args.warmup, args.iters,
                                   lambda: None)
        algbw = size / dpl_seconds / 1e9
        busbw = algbw * 2 * (WORLD_SIZE - 1) / WORLD_SIZE
        print(f"| {size} | {dpl_seconds * 1e6:.1f} | {algbw:.2f} | {busbw:.2f} | "
              f"{torch_seconds * 1e6:.1f} | {size / torch_seconds / 1e9:.2f} |")
        size *= 2
    print("busbw = algbw * 2(n-1)/n is 0 at world size 1: one rank moves no byte over a link")
    table.destroy(backend)
    dist.destroy_process_group()
    if failures:
        sys.exit(f"nccl_bus_bandwidth: FAIL: {failures} sizes gave wrong sums")


if __name__ == "__main__":
    main()
