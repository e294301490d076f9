"""What ``normbench data fetch NAME`` fetches: a shipped set's pinned source, or the source a
user names on the command line (a hub dataset, a commit, the files of each split, the
columns), checked before anything touches the network."""

from __future__ import annotations

from normbench.core.errors import UsageError
from normbench.data.hubcache import COMMIT, SET_NAME, SHIPPED, HubSource


def source_for(
    name: str,
    *,
    repo: str | None = None,
    revision: str | None = None,
    train: tuple[str, ...] = (),
    test: tuple[str, ...] = (),
    heldout: tuple[str, ...] = (),
    image_column: str | None = None,
    label_column: str | None = None,
    text_column: str | None = None,
) -> HubSource:
    """The source of ``name``: a shipped set takes no options (its source is pinned in
    normbench); a user's set needs --repo, --revision (a commit SHA), --train and either
    --image-column, --label-column and --test (images) or --text-column (text)."""
    given = {
        "--repo": repo,
        "--revision": revision,
        "--train": train,
        "--test": test,
        "--heldout": heldout,
        "--image-column": image_column,
        "--label-column": label_column,
        "--text-column": text_column,
    }
    if name in SHIPPED:
        extra = [option for option, value in given.items() if value]
        if extra:
            raise UsageError(
                f"{extra[0]}: {name} is a shipped set, pinned by normbench; fetch it with "
                f"`normbench data fetch {name}`, or your own under another name"
            )
        return SHIPPED[name]
    if name in ("hub_images", "hub_text") or not SET_NAME.match(name):
        raise UsageError(
            f"{name!r} is not a data set name; valid: {', '.join(SHIPPED)}, or a name of your "
            "own for --repo (lower-case letters, digits, '_', '-', '.')"
        )
    for option in ("--repo", "--revision", "--train"):
        if not given[option]:
            raise UsageError(
                f"{name} is not a shipped set ({', '.join(SHIPPED)}); your own needs {option} "
                "(docs/data.md)"
            )
    if "/" not in repo:
        raise UsageError(f"--repo {repo}: a hub dataset is OWNER/NAME")
    for option in ("--train", "--test", "--heldout"):
        for path in given[option]:
            if path.startswith("/") or ".." in path.split("/"):
                raise UsageError(
                    f"{option} {path}: a path inside the repository (no leading / and no ..)"
                )
    if not COMMIT.match(revision):
        raise UsageError(
            f"--revision {revision}: a pinned revision is a full commit SHA (40 hex digits), "
            "never a branch or a tag, which move"
        )
    if text_column and not (image_column or label_column or test):
        splits = {"train": train, **({"heldout": heldout} if heldout else {})}
        return HubSource(repo, revision, "text", splits, {"text": text_column})
    if image_column and label_column and test and not (text_column or heldout):
        splits = {"train": train, "test": test}
        return HubSource(
            repo, revision, "images", splits, {"image": image_column, "label": label_column}
        )
    raise UsageError(
        "name the columns of one kind: images: --image-column, --label-column and --test; "
        "text: --text-column (and optionally --heldout)"
    )
