"""Fault injectors behind one small interface: ``start()``, ``stop()``, ``describe()``."""

from chaos.injectors.base import Injector, InjectorError

__all__ = ["Injector", "InjectorError"]
