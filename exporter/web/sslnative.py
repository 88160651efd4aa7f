"""Two TLS settings Python's ssl module does not expose, made on the OpenSSL context beneath.

Go's crypto/tls (and so every exporter built on exporter-toolkit) can ask for a client
certificate and take it unverified (``RequestClientCert``, ``RequireAnyClientCert``), and can
restrict key exchange to a list of groups (``curve_preferences``). Python's ``SSLContext``
can do neither: ``verify_mode`` verifies whatever it asks for, and ``set_ecdh_curve`` takes one
curve. Each is one documented OpenSSL call on the ``SSL_CTX``: ``SSL_CTX_set_verify`` with a
callback that accepts the chain (OpenSSL still checks that the client holds the certificate's
key), and ``SSL_CTX_set1_groups_list``.

The ``SSL_CTX`` pointer is the first field of the ``SSLContext`` object after the object
header (CPython's ``Modules/_ssl.c``); the OpenSSL functions are looked up through the
``_ssl`` extension's own handle, so they are the ones it is linked to. Before anything is
changed the pointer is checked: the options and verify mode OpenSSL reports for it must equal
what the ``SSLContext`` reports. Where any step fails (an OpenSSL linked statically and not
exported, another Python implementation), ``available()`` is False and the caller refuses the
setting at start with one line.
"""

from __future__ import annotations

import ctypes
import functools
import ssl
from typing import Any

__all__ = ["SslNativeError", "accept_any_client_certificate", "available", "set_groups",
           "verify_client_certificates"]


class SslNativeError(RuntimeError):
    """The OpenSSL context beneath an ``SSLContext`` cannot be reached or refused a setting."""


_SSL_VERIFY_PEER = 0x01
_SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x02
_SSL_CTRL_SET_GROUPS_LIST = 92  # SSL_CTX_set1_groups_list is a macro over SSL_CTX_ctrl
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_MODE_BITS = {ssl.CERT_NONE: 0, ssl.CERT_OPTIONAL: _SSL_VERIFY_PEER,
              ssl.CERT_REQUIRED: _SSL_VERIFY_PEER | _SSL_VERIFY_FAIL_IF_NO_PEER_CERT}


def _accept(*_: Any) -> int:  # (OpenSSL's verdict on the chain, its X509_STORE_CTX)
    return 1  # whatever the chain: RequestClientCert/RequireAnyClientCert do not verify it


#: Kept for the life of the process: OpenSSL holds the pointer.
_accept_chain = _VERIFY_CALLBACK(_accept)
_NO_CALLBACK = _VERIFY_CALLBACK()  # NULL: OpenSSL's own verification decides


@functools.cache
def _library() -> Any:
    """libssl as the ``_ssl`` extension sees it, or None."""
    import _ssl  # noqa: PLC0415  (the extension module behind ``ssl``)

    try:
        lib = ctypes.CDLL(getattr(_ssl, "__file__", None))  # None: built into the interpreter
        lib.SSL_CTX_get_options.restype = ctypes.c_uint64
        lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
        lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_set_verify.restype = None
        lib.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CALLBACK]
        lib.SSL_CTX_ctrl.restype = ctypes.c_long
        lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long,
                                     ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return lib


def _pointer(context: ssl.SSLContext) -> int:
    """The ``SSL_CTX *`` of ``context``, checked against what ``context`` reports."""
    lib = _library()
    if lib is None or not isinstance(context, ssl.SSLContext):
        raise SslNativeError("this Python's ssl module does not expose OpenSSL's functions")
    address = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not address:
        raise SslNativeError("no OpenSSL context found")
    options = int(lib.SSL_CTX_get_options(address))
    mode = int(lib.SSL_CTX_get_verify_mode(address)) & 0x03
    if options != int(context.options) or mode != _MODE_BITS[context.verify_mode]:
        raise SslNativeError("the OpenSSL context does not match the SSLContext")
    return int(address)


@functools.cache
def available() -> bool:
    """Whether this process can make the two settings (checked once, on a scratch context)."""
    try:
        _pointer(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    except SslNativeError:
        return False
    return True


def accept_any_client_certificate(context: ssl.SSLContext, *, require: bool) -> None:
    """Ask for a client certificate, require one when ``require``, and never verify its chain
    (Go's ``RequireAnyClientCert``, or ``RequestClientCert`` without ``require``).

    Setting ``context.verify_mode`` afterwards keeps the callback (CPython re-installs the one
    it finds): ``verify_client_certificates`` removes it.

    Raises:
        SslNativeError: the OpenSSL context cannot be reached.
    """
    context.verify_mode = ssl.CERT_REQUIRED if require else ssl.CERT_OPTIONAL
    address = _pointer(context)
    _library().SSL_CTX_set_verify(address, _MODE_BITS[context.verify_mode], _accept_chain)


def verify_client_certificates(context: ssl.SSLContext) -> None:
    """Undo ``accept_any_client_certificate``: certificates are verified again, as
    ``context.verify_mode`` says.

    Raises:
        SslNativeError: the OpenSSL context cannot be reached.
    """
    address = _pointer(context)
    _library().SSL_CTX_set_verify(address, _MODE_BITS[context.verify_mode], _NO_CALLBACK)


def set_groups(context: ssl.SSLContext, names: list[str]) -> None:
    """Restrict key exchange to OpenSSL's groups ``names``, in that order of preference.

    Raises:
        SslNativeError: the context cannot be reached, or OpenSSL does not know a group.
    """
    address = _pointer(context)
    text = ":".join(names).encode("ascii")
    if _library().SSL_CTX_ctrl(address, _SSL_CTRL_SET_GROUPS_LIST, 0, text) != 1:
        raise SslNativeError(f"OpenSSL refused the groups {':'.join(names)}")
