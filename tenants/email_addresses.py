"""E-mail addresses as accounts and invitations keep them: one spelling per address, no look-alikes.

An address is normalised (NFKC, lowercase, the domain through IDNA's UTS 46 mapping and back to
Unicode), so a fullwidth or upper-case spelling of ``bob@example.com`` is that address. An address
whose local part or a domain label mixes scripts (``paypal.com`` with a Cyrillic "a"), or whose
label is written wholly in another script's look-alikes of Latin letters (``apple.com`` spelled
in Cyrillic), is refused: it would pass for an address it is not. Scripts that are written
together (Han with Hiragana and Katakana, with Bopomofo, or with Hangul, each also with Latin)
are allowed, as Unicode's "highly restrictive" profile (UTS 39) allows them.
"""

import unicodedata

import idna
from confusable_homoglyphs import categories, confusables
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

INVALID = "Enter a valid email address."
LOOK_ALIKE = (
    "This address has letters of another script that look like the ones you may mean (such as a "
    "Cyrillic letter that looks like a Latin one); type it again in one script."
)
# Scripts that do not decide which script a text is written in.
SHARED_SCRIPTS = {"COMMON", "INHERITED"}
WRITTEN_TOGETHER = (
    {"LATIN", "HAN", "HIRAGANA", "KATAKANA"},
    {"LATIN", "HAN", "BOPOMOFO"},
    {"LATIN", "HAN", "HANGUL"},
)


def email_address_normalize(raw: str) -> str:
    """The one spelling of an address; ``ValueError`` if its domain is not a valid name."""
    local, at, domain = unicodedata.normalize("NFKC", raw).strip().lower().rpartition("@")
    if not at or not local or not domain:
        raise ValueError("not an e-mail address")
    try:
        domain = idna.decode(idna.encode(domain, uts46=True))
    except idna.IDNAError as error:
        raise ValueError("not a domain name") from error
    return f"{local}@{domain}"


def email_address_clean(raw: str, *, field: str = "email") -> str:
    """``raw`` normalised, or a ``ValidationError`` on ``field`` if it is invalid or a look-alike."""
    try:
        address = email_address_normalize(raw)
    except ValueError as error:
        raise ValidationError({field: [INVALID]}) from error
    local, _, domain = address.rpartition("@")
    labels = domain.split(".")
    if any(_mixes_scripts(part) for part in [local, *labels]) or _is_latin_look_alike(labels):
        raise ValidationError({field: [LOOK_ALIKE]})
    try:
        # Django's check reads an internationalised domain in its ASCII form.
        validate_email(f"{local}@{idna.encode(domain).decode()}")
    except (ValidationError, idna.IDNAError) as error:
        raise ValidationError({field: [INVALID]}) from error
    return address


def _mixes_scripts(text: str) -> bool:
    scripts = set(categories.unique_aliases(text)) - SHARED_SCRIPTS
    return len(scripts) > 1 and not any(scripts <= together for together in WRITTEN_TOGETHER)


def _is_latin_look_alike(labels: list[str]) -> bool:
    """A label in another script made only of look-alikes of Latin letters, under a Latin top-level
    domain (under its own script's, such as ``.рф``, the name reads as what it is)."""
    if not labels[-1].isascii():
        return False
    return any(not label.isascii() and _all_look_like_latin(label) for label in labels[:-1])


def _all_look_like_latin(label: str) -> bool:
    letters = [character for character in label if character.isalpha()]
    return bool(letters) and all(
        confusables.is_confusable(character, preferred_aliases=["latin"]) for character in letters
    )
