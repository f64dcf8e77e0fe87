"""Names piq binds at import; each raises when called (see torchvision/__init__.py)."""
from . import inception  # noqa: F401
from .inception import absent as vgg16, absent as vgg19, absent as inception_v3  # noqa: F401
