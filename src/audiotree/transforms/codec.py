"""Neural-codec protocols and the transforms that fill ``codes`` / ``latents``.

The codec owns everything about encoding (resampling, channel handling, the
output shape, whether it jits): audiotree stores what it returns verbatim.
These objects are shared by the NumPy and JAX namespaces.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from audiotree.core import AudioTree
from audiotree.transforms.base import MapTransform

__all__ = ["AudioCodec", "LatentAudioCodec", "encode_latents", "encode_with_codec"]


@runtime_checkable
class AudioCodec(Protocol):
    """Anything with ``encode(audio: AudioTree) -> codes`` (leading batch axis)."""

    def encode(self, audio: AudioTree) -> Any:
        """Returns the discrete codes of ``audio``, with a leading batch axis."""
        ...


@runtime_checkable
class LatentAudioCodec(Protocol):
    """Anything with ``encode_to_latent(audio: AudioTree) -> latents`` (leading batch axis)."""

    def encode_to_latent(self, audio: AudioTree) -> Any:
        """Returns the continuous latents of ``audio``, with a leading batch axis."""
        ...


def encode_codes_kernel(audio_tree: AudioTree, codec: Any) -> AudioTree:
    """Sets ``codes = codec.encode(audio_tree)`` unless codes are already present."""
    if audio_tree.codes is not None:
        return audio_tree
    return audio_tree.replace(codes=codec.encode(audio_tree))


def encode_latents_kernel(audio_tree: AudioTree, codec: Any) -> AudioTree:
    """Sets ``latents = codec.encode_to_latent(audio_tree)`` unless latents are present."""
    if audio_tree.latents is not None:
        return audio_tree
    return audio_tree.replace(latents=codec.encode_to_latent(audio_tree))


def encode_with_codec(codec: AudioCodec, *, scope: Any = None, output_key: Any = None) -> MapTransform:
    """A map transform storing ``codec.encode(tree)`` in ``codes`` (idempotent).

    Trees that already carry ``codes`` pass through, so put this stage last:
    any later audio change clears ``codes``. The transform holds ``codec``
    and pickles if the codec does.

    Args:
      codec: an :class:`AudioCodec`.
      scope: which AudioTree leaves to encode (see ``random_transform``).
      output_key: write the encoded tree beside the original (dict elements).
    """
    if not isinstance(codec, AudioCodec):
        raise TypeError(f"encode_with_codec needs an object with .encode(audio), got {type(codec).__name__}.")
    return MapTransform(
        encode_codes_kernel, {"codec": codec}, name="encode_with_codec", scope=scope, output_key=output_key
    )


def encode_latents(codec: LatentAudioCodec, *, scope: Any = None, output_key: Any = None) -> MapTransform:
    """A map transform storing ``codec.encode_to_latent(tree)`` in ``latents`` (idempotent).

    Args:
      codec: a :class:`LatentAudioCodec`.
      scope: which AudioTree leaves to encode (see ``random_transform``).
      output_key: write the encoded tree beside the original (dict elements).
    """
    if not isinstance(codec, LatentAudioCodec):
        raise TypeError(
            f"encode_latents needs an object with .encode_to_latent(audio), got {type(codec).__name__}."
        )
    return MapTransform(
        encode_latents_kernel, {"codec": codec}, name="encode_latents", scope=scope, output_key=output_key
    )
