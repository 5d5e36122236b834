"""How a method's settings are declared and read: the :func:`setting` field, the
:class:`MethodSettings` base class and the typing of values typed on a command line.

A field carries its default and its help text. A trainer takes its settings object whole, and
the command line, the settings reference and a trained model's record read names, defaults
and help from the same fields.

    settings = DistillationSettings(rounds=3)
    settings.replace(lr=2e-5)         # a copy with lr changed; unknown names are refused
    DistillationSettings.parse('lr', '2e-5')   # a value typed from the command line

The fields the weights depend on (``trains``) are a trained model's identity
(:meth:`MethodSettings.identity`). A field whose default depends on other settings is declared
None and takes its value when the object is made (:meth:`MethodSettings.chosen_defaults`).
"""
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

GROUPS = ('queries', 'model', 'teacher', 'method', 'training', 'checkpoints')

# a hint's union, as typing writes it (Optional[int]) and as Python does (int | None)
UNIONS = (Union, types.UnionType)


def setting(default: Any, help: str, *, group: str = 'method', trains: bool = True,
            choices: tuple | None = None):
    """A settings field: its default, its help text, the group the settings reference lists it
    under (:data:`GROUPS`), whether the trained weights depend on it (``trains``) and, where it
    takes one of a few values, those values."""
    if group not in GROUPS:
        raise ValueError(f'group must be one of {", ".join(GROUPS)}, not {group!r}')
    return field(default=default,
                 metadata={'help': help, 'group': group, 'trains': trains, 'choices': choices})


@dataclass(frozen=True)
class MethodSettings:
    """The settings of one training method; each method has a subclass."""

    seed: int = setting(0, 'Seeds the model\'s initialisation, the batches and the query sampling.',
                        group='training')
    warmup: float = setting(0.1, 'The share of the steps over which the learning rate rises '
                                 'linearly to lr; it then decays linearly to zero.',
                            group='training')
    weight_decay: float = setting(0.01, 'AdamW\'s weight decay.', group='training')
    accumulation: int = setting(1, 'Batches whose gradients are summed into one optimiser step.',
                                group='training')
    gradient_checkpointing: bool | None = setting(
        None, 'Recompute each layer\'s activations in the backward pass, holding only its input: '
              'less memory for a second forward pass, the same weights. None: the method\'s '
              'default (on where a step encodes passages with gradients).',
        group='checkpoints', trains=False)

    def __post_init__(self):
        for name, kind in typing.get_type_hints(type(self)).items():
            value = getattr(self, name, None)
            floats = typing.get_args(kind) if typing.get_origin(kind) in UNIONS else (kind,)
            if (float in floats and isinstance(value, int) and not isinstance(value, bool)
                    and int not in floats):  # (1 and 1.0 are one setting: one model)
                object.__setattr__(self, name, float(value))
        chosen = {name: value for name, value in self.chosen_defaults().items()
                  if getattr(self, name) is None}
        for name, value in chosen.items():  # (frozen: set once, here)
            object.__setattr__(self, name, value)
        object.__setattr__(self, '_chosen', frozenset(chosen))
        for f in dataclasses.fields(self):
            choices = f.metadata.get('choices')
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f'{f.name} must be one of {", ".join(map(str, choices))}, '
                                 f'not {getattr(self, f.name)!r}')
        self.validate()

    def chosen_defaults(self) -> dict[str, Any]:
        """The fields whose default depends on other settings, each with the value it takes here
        where it is left at None; a subclass documents its rule."""
        return {}

    def validate(self):
        """Refuses values that cannot train (a subclass adds its own rules)."""
        for name in ('batch_size', 'accumulation', 'epochs', 'per_passage'):
            if getattr(self, name, 1) < 1:
                raise ValueError(f'{name} must be at least 1, not {getattr(self, name)}')
        if not 0.0 <= self.warmup <= 1.0:
            raise ValueError(f'warmup is a share of the steps, in [0, 1], not {self.warmup}')
        every = getattr(self, 'checkpoint_every', None)
        if not (every is None or every == 'epoch'
                or (isinstance(every, int) and not isinstance(every, bool) and every > 0)):
            raise ValueError(f'checkpoint_every is a number of steps, epoch or None, not {every!r}')

    @property
    def checkpoint_interval(self) -> int | str | None:
        """When this run saves checkpoints: every this many steps, ``'epoch'``, or None (the final
        model only)."""
        return getattr(self, 'checkpoint_every', None)

    # -- reading the fields ---------------------------------------------------------

    @classmethod
    def fields(cls) -> list[dataclasses.Field]:
        """The fields, grouped as :data:`GROUPS` orders them."""
        declared = dataclasses.fields(cls)
        return sorted(declared, key=lambda f: GROUPS.index(f.metadata['group']))

    @classmethod
    def defaults(cls) -> dict:
        """Every setting at its default, in :meth:`fields` order."""
        return {f.name: f.default for f in cls.fields()}

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in cls.fields()]

    def asdict(self) -> dict:
        """Every setting with its value, in :meth:`fields` order, as :meth:`of` reads it back.

            DistillationSettings.of(**DistillationSettings(rounds=3).asdict())
        """
        return {f.name: getattr(self, f.name) for f in self.fields()}

    @property
    def chosen(self) -> frozenset:
        """The fields whose value :meth:`chosen_defaults` chose here (left at None)."""
        return self._chosen

    def identity(self) -> dict:
        """The settings the trained weights depend on: a trained model's identity."""
        return {f.name: getattr(self, f.name) for f in self.fields() if f.metadata['trains']}

    # -- changing them --------------------------------------------------------------

    @classmethod
    def check_names(cls, changes: dict[str, Any]) -> dict[str, Any]:
        """``changes``, where every name is a setting of the class; an unknown name is refused."""
        unknown = [name for name in changes if name not in cls.names()]
        if unknown:
            raise ValueError(f'{cls.__name__} has no setting {unknown[0]!r}; its settings: '
                             f'{", ".join(cls.names())}')
        return dict(changes)

    @classmethod
    def of(cls, **changes) -> 'MethodSettings':
        """The defaults with ``changes`` (unknown names are refused, with the known ones)."""
        return cls(**cls.check_names(changes))

    def replace(self, **changes) -> 'MethodSettings':
        """A copy with ``changes``, validated again; a field :meth:`chosen_defaults` chose is
        chosen again from the changed settings (which ``dataclasses.replace`` would not do)."""
        if not changes:
            return self
        changes = self.check_names(changes)
        again = {name: None for name in self._chosen if name not in changes}
        return dataclasses.replace(self, **again, **changes)

    @classmethod
    def parse(cls, name: str, text: str) -> Any:
        """``text`` (as typed on the command line) as a value of setting ``name``, by its type."""
        cls.check_names({name: text})
        return parse_value(text, typing.get_type_hints(cls)[name])


def parse_value(text: str, kind) -> Any:
    """``text`` as a value of type ``kind`` (a type hint: Optional, Union, bool, int, float,
    str)."""
    options = typing.get_args(kind) if typing.get_origin(kind) in UNIONS else (kind,)
    if text.lower() == 'none' and type(None) in options:
        return None
    for option in options:
        if option is bool:
            if text.lower() in ('1', 'true', 'yes', 'on', '0', 'false', 'no', 'off'):
                return text.lower() in ('1', 'true', 'yes', 'on')
        elif option in (int, float):
            try:
                return option(text)
            except ValueError:
                continue
        elif option is str:
            return text
    kinds = [getattr(o, '__name__', str(o)) for o in options if o is not type(None)]
    raise ValueError(f'{text!r} is not a {" or ".join(kinds)}')
