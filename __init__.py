"""Not a module of the package: the root of a specproof checkout, read only when Python takes the
checkout itself for the package.

That happens when the current folder holds a checkout named ``specproof`` (``git clone ...
specproof``, then a notebook or ``python`` started beside it): the folder shadows the installed
package, and without this file Python would import it as an empty namespace, so that
``specproof.EngineSpec`` fails ("module 'specproof' has no attribute"). Here the checkout answers
as the package it holds: its facade (``specproof/__init__.py``) runs in this module, and the
sub-packages resolve to the checkout's folders as setuptools' ``package-dir`` maps them
(``specproof.reference`` -> ``reference/``, ``specproof.properties`` -> ``properties/``, ...).
"""

import os as _os

_root = _os.path.dirname(_os.path.abspath(__file__))
_facade = _os.path.join(_root, "specproof", "__init__.py")
__path__ = [_os.path.join(_root, "specproof"), _root]
with open(_facade, encoding="utf-8") as _f:
    exec(compile(_f.read(), _facade, "exec"))  # noqa: S102 -- the package's own facade, as its __init__
