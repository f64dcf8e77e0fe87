"""Imported by piq's FID Inception on old torchvision versions only; raises when called."""
from .inception import absent as load_state_dict_from_url  # noqa: F401
