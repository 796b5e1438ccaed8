"""What Agentry checks of an uploaded image: that it decodes, and that it is not a pixel bomb."""

from typing import IO

from PIL import Image, UnidentifiedImageError

from files.sniffing import UnsupportedFile

# Pillow's own guard is a warning up to twice this: Agentry refuses past it.
MAX_IMAGE_PIXELS = 50_000_000


def image_dimensions(fileobj: IO[bytes]) -> tuple[int, int]:
    """(width, height) of an image that decodes; UnsupportedFile with a reason otherwise."""
    fileobj.seek(0)
    try:
        with Image.open(fileobj) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise UnsupportedFile(
                    f"the image is {width} by {height} pixels; the most Agentry accepts is "
                    f"{MAX_IMAGE_PIXELS:,} pixels"
                )
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise UnsupportedFile(f"the image could not be decoded ({error})") from error
    finally:
        fileobj.seek(0)
    return width, height
