"""Names a package exports but loads on first use (PEP 562 module ``__getattr__``).

A package ``__init__`` keeps a ``_LAZY`` table ``{name: module}`` (the name is
an attribute of that module) or ``{name: (module, attribute)}`` (``None`` as the
attribute: the module itself), and takes its ``__getattr__`` and ``__dir__``
from :func:`lazy_exports`. A name is imported once, then cached in the
package's namespace, so later lookups are plain attribute reads. Nothing is
imported before a name is used; ``tests/test_architecture.py`` checks that no
eager import defeats a table.

>>> import types
>>> package = types.ModuleType("package")
>>> package.__getattr__, package.__dir__ = lazy_exports("package", {"sqrt": "math"}, vars(package))
>>> package.sqrt(9.0), "sqrt" in vars(package)
(3.0, True)
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, MutableMapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    table: Mapping[str, str | tuple[str, str | None]],
    namespace: MutableMapping[str, Any],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for the names in ``table``.

    Args:
      package: the package's ``__name__`` (for the ``AttributeError`` message).
      table: ``{name: module}`` or ``{name: (module, attribute or None)}``.
      namespace: the package's ``globals()``, where loaded names are cached.
    """

    def __getattr__(name: str) -> Any:
        entry = table.get(name)
        if entry is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = (entry, name) if isinstance(entry, str) else entry
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())) | set(table))

    return __getattr__, __dir__
