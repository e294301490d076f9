"""`normbench data fetch` and `normbench data list`: the data sets fetched from the Hugging
Face hub into the cache (normbench.data.hubcache). fetch is the only command that touches the
network; every run reads the cache alone and checks it first.
"""

from __future__ import annotations

from typing import Annotated

import typer

from normbench.cli.app import data_app, fail


@data_app.command("fetch")
def fetch(
    name: Annotated[str, typer.Argument(help="cifar10, tinystories, or a name for your own set.")],
    repo: Annotated[
        str | None, typer.Option("--repo", help="Your own set: the hub dataset, OWNER/NAME.")
    ] = None,
    revision: Annotated[
        str | None, typer.Option("--revision", help="Your own set: a commit SHA (40 hex).")
    ] = None,
    train: Annotated[
        list[str] | None, typer.Option("--train", help="Train files: repo paths or globs.")
    ] = None,
    test: Annotated[
        list[str] | None, typer.Option("--test", help="Images: test files (paths or globs).")
    ] = None,
    heldout: Annotated[
        list[str] | None,
        typer.Option("--heldout", help="Text: held-out files, split into val and test."),
    ] = None,
    image_column: Annotated[
        str | None, typer.Option("--image-column", help="Images: the image column.")
    ] = None,
    label_column: Annotated[
        str | None, typer.Option("--label-column", help="Images: the integer label column.")
    ] = None,
    text_column: Annotated[
        str | None, typer.Option("--text-column", help="Text: the text column.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Fetch again even if cached and intact.")
    ] = False,
) -> None:
    """Download a data set at its pinned revision, check its files' sha256, decode it once and
    write it with its manifest into the cache ($NORMBENCH_CACHE)."""
    from normbench.core.errors import UsageError
    from normbench.data.hubfetch import fetch as fetch_set
    from normbench.data.hubsource import source_for

    try:
        source = source_for(
            name,
            repo=repo,
            revision=revision,
            train=tuple(train or ()),
            test=tuple(test or ()),
            heldout=tuple(heldout or ()),
            image_column=image_column,
            label_column=label_column,
            text_column=text_column,
        )
        manifest, fetched = fetch_set(name, source, force)
    except UsageError as err:
        raise fail(str(err)) from None
    verb = "fetched" if fetched else "already cached, intact:"
    typer.echo(
        f"{name} {verb} {manifest.source['repo']}@{manifest.source['revision']}, "
        f"{_size(manifest.size)}, fingerprint {manifest.fingerprint}"
    )


@data_app.command("list")
def list_sets() -> None:
    """The cached data sets: size on disk, fingerprint, source, when fetched, and whether every
    file is there at its size (checksums are a run's to check: no file is hashed here)."""
    from normbench.core.text import plain
    from normbench.data.hubcache import cached_sets, set_dir, size_problem

    found = cached_sets()
    if not found:
        typer.echo(
            f"no data set in the cache ({set_dir('x').parent}); fetch one: normbench data fetch "
            "cifar10"
        )
        return
    for manifest in found:  # a few lines each: a full commit SHA does not fit a table's cell
        source = manifest.source
        state = size_problem(manifest) or "all files there"
        typer.echo(
            plain(
                f"{manifest.name} ({manifest.decoded.get('kind')}, {_size(manifest.size)}, "
                f"fingerprint {manifest.fingerprint}): {state}"
            )
        )
        typer.echo(plain(f"  from {source['repo']}@{source['revision']}"))
        typer.echo(plain(f"  fetched {manifest.fetched_at}"))


def _size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size} B"
