"""What a Hermes process imports as ``hermes_state`` while the shim is installed.

The finder of ``hermes_models_hook`` (beside this file) loads this module under
that name; it puts :func:`hermes_models.hermes_shim.served_module` in its own
place, so the importer gets :mod:`hermes_models.hermes_state` itself (or, for a
Hermes of another schema than 16, Hermes' own module).
"""

import sys

from hermes_models.hermes_shim import served_module

sys.modules[__name__] = served_module()
