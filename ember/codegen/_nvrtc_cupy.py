"""CuPy's NVRTC wrapper behind the call shapes :mod:`.nvrtc` uses (cuda-bindings').

A GPU machine may have CuPy (with its own ``libnvrtc``) and no ``cuda-bindings``; then
``cupy_backends.cuda.libs.nvrtc`` compiles Ember's kernels instead. CuPy's wrapper returns
values and raises ``NVRTCError`` where cuda-bindings returns ``(status, value...)``; this
adapter turns the one into the other, and gives :mod:`.nvrtc` the program's log and output
as values (:meth:`CupyNVRTC.log`, :meth:`CupyNVRTC.output`) instead of filled buffers.
Its ``compileProgram`` releases the GIL, like cuda-bindings'.
"""
from __future__ import annotations

__all__ = ["CupyNVRTC"]

#: ``NVRTC_ERROR_COMPILATION``: what a failed compile reports when CuPy's error has no code.
_COMPILATION = 6


def _status(e) -> int:
    """The NVRTC status code carried by CuPy's ``NVRTCError`` (else a compile error)."""
    code = getattr(e, "status", None)
    return code if isinstance(code, int) and code else _COMPILATION


class CupyNVRTC:
    """``cuda.bindings.nvrtc``'s functions (those :mod:`.nvrtc` calls) over CuPy's."""

    __name__ = "cupy_backends.cuda.libs.nvrtc"

    def __init__(self, cnv):
        self._c = cnv

    def nvrtcVersion(self):
        major, minor = self._c.getVersion()
        return 0, major, minor

    def nvrtcCreateProgram(self, src: bytes, name: bytes, n: int, headers, names):
        try:
            return 0, self._c.createProgram(src.decode(), name.decode(), [], [])
        except Exception as e:      # noqa: BLE001 - CuPy's NVRTCError: its code
            return _status(e), None

    def nvrtcCompileProgram(self, prog, n: int, options):
        try:
            self._c.compileProgram(prog, [o.decode() for o in options[:n]])
        except Exception as e:      # noqa: BLE001 - the log says why
            return (_status(e),)
        return (0,)

    def nvrtcDestroyProgram(self, prog):
        self._c.destroyProgram(prog)
        return (0,)

    def log(self, prog) -> str:
        """The program's compile log."""
        return self._c.getProgramLog(prog)

    def output(self, prog, what: str) -> bytes:
        """The program's ``"PTX"`` (NUL-terminated, as cuda-bindings') or ``"CUBIN"``."""
        if what == "PTX":                   # NOTE: str in older CuPy, bytes in newer
            ptx = self._c.getPTX(prog)
            return (ptx.encode() if isinstance(ptx, str) else bytes(ptx)).rstrip(b"\0") + b"\0"
        fn = getattr(self._c, "getCUBIN", None)
        if fn is None:
            from .nvrtc import NVRTCUnavailable
            raise NVRTCUnavailable("ember.codegen.nvrtc: this CuPy's NVRTC wrapper has no "
                                   "getCUBIN; PTX only")
        return bytes(fn(prog))
