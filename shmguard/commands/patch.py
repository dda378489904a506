"""`shmguard patch`: fix the /dev/shm volume, mount and memory limit of every pod template in YAML manifests.

Reads every file (or stdin) completely and sizes all of them in memory first
(shmguard.manifests.podspec.patch_documents); every template is reported, changed or
left alone and why, on stderr (`--json`: one object). A bad file or document is
reported with the others, then exit 2 and no file written. The output differs from
the input only in the lines the patch had to change (shmguard.manifests.yamledit).
With -i every changed file is first written beside itself (and its old text too)
and only then renamed into place, keeping its mode and owner, so a read-only
directory or a full disk fails before any file changes, and a rename that fails
puts back the files already replaced: all or nothing, and the message says which. --check changes nothing and prints a unified diff
of what would change.
"""

from __future__ import annotations

import json
import os
import sys

from shmguard.errors import ShmguardError
from shmguard.files import commit_staged, discard_staged, stage_atomic_bytes
from shmguard.manifests import yamlio
from shmguard.manifests.podspec import PatchOptions, PatchSummary, patch_documents
from shmguard.manifests.templates import ManifestError
from shmguard.manifests.yamledit import PatchedText, patch_text, unified_diff
from shmguard.record import Record


def read_text(path: str, name: str) -> str:
    """The file (or stdin) as text, line ends as they are; at most the loader's limit (+1, to tell it was exceeded)."""
    limit = yamlio.MAX_INPUT_BYTES + 1
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)
            if stream is None:  # a text stream put in place of stdin
                return sys.stdin.read(limit)
            data = stream.read(limit)
        else:
            with open(path, "rb") as f:
                data = f.read(limit)
    except OSError as exc:
        raise ManifestError(f"{name}: cannot read: {exc.strerror}") from None
    if len(data) >= limit:  # before decoding: the cut may split a character
        raise ManifestError(f"{name}: more than the {yamlio.MAX_INPUT_BYTES // 2**20} MiB shmguard patch reads; "
                            f"split the manifest")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def target_of(path: str, follow_symlinks: bool) -> str:
    """The file -i rewrites: path itself; a symlink only with follow_symlinks (then the file it points to)."""
    if not os.path.islink(path):
        return path
    if not follow_symlinks:
        raise ManifestError(f"{path}: is a symbolic link (to {os.readlink(path)}); -i would replace the link by a "
                            f"file: give --follow-symlinks to patch the file it points to")
    return os.path.realpath(path)


def patch_options(in_place: bool, check: bool, files, kinds, names, labels, namespaces, opt_in: bool,
                  container: str | None, memory: str | None, size_unsized: bool, include_init: bool,
                  all_templates: bool = False) -> PatchOptions:
    """Which templates to touch and how, from the command line; UsageError for options that do not go together."""
    from shmguard.errors import UsageError
    from shmguard.manifests.podspec import asked_memory

    if in_place and check:
        raise UsageError("-i and --check do not go together")
    if in_place and (not files or "-" in files):
        raise UsageError("-i needs files to rewrite, not stdin")
    return PatchOptions(kinds=tuple(k for item in kinds for k in item.split(",") if k), names=tuple(names),
                        labels=tuple(labels), namespaces=tuple(namespaces), opt_in=opt_in, container=container,
                        memory=None if memory is None else asked_memory(memory, "--memory"),
                        size_unsized=size_unsized, include_init=include_init, all_templates=all_templates)


def patch_one(text: str, name: str, defaults, options: PatchOptions | None = None) -> tuple[PatchedText, PatchSummary]:
    """The patched text of one input and what was done to each template (pure: no I/O)."""
    summaries: list[PatchSummary] = []

    def mutate(docs: list) -> list[str]:
        summaries.append(patch_documents(docs, defaults, options))
        return list(summaries[-1].changes)

    patched = patch_text(text, name, mutate)
    return patched, summaries[-1]


def patch(defaults, paths: list[str], in_place: bool, check: bool, follow_symlinks: bool = False, out=None,
          err=None, options: PatchOptions | None = None, as_json: bool = False, notes: list[str] | None = None) -> int:
    """notes: what the options said on the way (a measured --dataset), inside the JSON object with --json."""
    err = err or sys.stderr
    options = given_job(options or PatchOptions(), defaults)
    with yamlio.no_gc():
        try:
            return _patch(defaults, paths, in_place, check, follow_symlinks, out or sys.stdout, err, options, as_json,
                          notes or [])
        except ShmguardError as exc:
            if not as_json:
                raise
            return json_failure(exc, notes or [], err)


def given_job(options: PatchOptions, defaults) -> PatchOptions:
    """The options, saying whether the job was given for these manifests (patch's job options, fn's
    functionConfig): then a template with no evidence either way is sized for it (shmguard.manifests.scope)."""
    from shmguard.job import describes_job
    from shmguard.manifests.podspec import defaults_dict

    return options.replace(job_given=describes_job(defaults_dict(defaults)))


def json_failure(exc: ShmguardError, notes: list[str], err) -> int:
    """With --json, a failure before or after the templates (a bad option, a file -i cannot write) is the one JSON
    object too, so that `2> summary.json` always parses; its exit code stays the error's."""
    from shmguard.jsonout import stamp

    data = {"files": [], "changes": 0, "errors": True, "error": str(exc), "notes": list(notes)}
    print(json.dumps(stamp(data), indent=2), file=err)
    return exc.exit_code


class FileResult(Record):
    """One input: where it goes, its name for messages, its text and what the patch made of it; or why not."""

    target: str
    name: str
    text: str = ""
    patched: PatchedText | None = None
    summary: PatchSummary | None = None
    error: str | None = None


def _patch(defaults, paths, in_place, check, follow_symlinks, out, err, options, as_json, notes) -> int:
    results: list[FileResult] = []
    for path in paths or ["-"]:
        name = "stdin" if path == "-" else path
        try:
            target = target_of(path, follow_symlinks) if in_place and path != "-" else path
            text = read_text(target, name)
            patched, summary = patch_one(text, name, defaults, options)
        except ManifestError as exc:  # this file is reported; the others still are
            message = str(exc)
            results.append(FileResult(path, name, error=message if message.startswith(name) else f"{name}: {message}"))
            continue
        results.append(FileResult(target, name, text, patched, summary))
    done = [(r, r.patched, r.summary) for r in results if r.patched is not None and r.summary is not None]
    failed = any(r.error for r in results) or any(summary.errors for _r, _p, summary in done)
    changes = sum(len(summary.changes) for _r, _p, summary in done)

    def report() -> None:
        """Every template, changed or left alone and why (and each document that fell back to a re-dump); with
        --json all of it in the one object, so that `2> summary.json` parses."""
        if as_json:
            from shmguard.jsonout import stamp

            data = {"files": [{"file": r.name, "error": r.error, **(r.summary.to_json() if r.summary else {}),
                               "rewritten": [str(f) for f in r.patched.fallbacks] if r.patched else []}
                              for r in results],
                    "changes": changes, "errors": failed, "notes": list(notes)}
            print(json.dumps(stamp(data), indent=2), file=err)
            return
        for r, patched, _summary in done:
            for fallback in patched.fallbacks:
                print(f"{r.name}: {fallback}", file=err)
        for r in results:
            for line in [r.error] if r.error else r.summary.lines() if r.summary else []:
                print(line if r.error else f"{r.name}: {line}", file=err)

    if failed:
        report()
        if not as_json and (len(results) > 1 or not results[0].error):  # one unreadable input says all in its line
            print("shmguard patch: errors above; nothing written", file=err)
        return 2
    if check:
        report()
        for r, patched, _summary in done:
            if patched.text != r.text:
                out.writelines(unified_diff(r.text, patched.edits, fromfile=r.name, tofile=f"{r.name} (patched)"))
        if not as_json:  # with --json, stderr carries exactly the one object
            print(f"shmguard patch: {changes} changes needed" if changes else "shmguard patch: nothing to change",
                  file=err)
        return 1 if changes else 0
    if in_place:  # written (or refused, in one line) before any change is reported as made
        write_all([(r.target, r.name, patched.text, r.text) for r, patched, _s in done
                   if r.target != "-" and patched.text != r.text])
    report()
    for r, patched, _summary in done:
        if not in_place or r.target == "-":
            out.write(patched.text)
    return 0


def write_all(files: list[tuple[str, str, str, str]]) -> None:
    """Replace every (path, name, new text, old text) or none.

    Everything that can fail before a rename is done for all files first: each new text and each old one
    is written beside its file (a read-only directory, a full disk: nothing changed). Then the new ones are
    renamed into place; when one rename fails, the files already replaced get their old text back the same
    way, and the message says exactly which files, if any, were left changed.
    """
    for path, name, _new, _old in files:
        if os.path.isdir(path) or not os.path.exists(path):
            raise ManifestError(f"{name}: is no longer a file; no file was changed")
    new: list[str] = []
    old: list[str] = []
    try:
        for texts, index in ((new, 2), (old, 3)):
            for entry in files:
                try:
                    texts.append(stage_atomic_bytes(entry[0], entry[index].encode("utf-8")))
                except OSError as exc:
                    raise ManifestError(f"{entry[1]}: cannot write it ({exc.strerror or exc}); no file was changed") from None
    except BaseException:
        for tmp in new + old:
            discard_staged(tmp)
        raise
    for index, (path, name, _new, _old) in enumerate(files):
        try:
            commit_staged(new[index], path)
        except OSError as exc:
            failed = f"{name}: cannot replace it ({exc.strerror or exc})"
            kept = []
            for done in range(index):
                try:
                    commit_staged(old[done], files[done][0])
                except OSError:
                    kept.append(files[done][1])
            for tmp in new[index:] + old:
                discard_staged(tmp)
            if not kept:
                raise ManifestError(f"{failed}; the {index} file(s) patched before it were put back: no file was "
                                    f"changed") from None
            raise ManifestError(f"{failed}; left patched, as they could not be put back: {', '.join(kept)}; not "
                                f"changed: every other file") from None
    for tmp in old:
        discard_staged(tmp)


def patch_command(job, files, *, in_place: bool, check: bool, follow_symlinks: bool, as_json: bool, **selection) -> int:
    """`shmguard patch` as the command line gives it: the selection checked and the job's defaults read (with --json,
    their notes and a bad option inside the one object), then the files patched."""
    notes: list[str] = []  # with --json, inside the one object
    try:
        options = patch_options(in_place, check, files, selection["kinds"], selection["names"], selection["labels"],
                                selection["namespaces"], selection["opt_in"], selection["container"],
                                selection["memory"], selection["size_unsized"], selection["include_init"],
                                selection["all_templates"])
        defaults = job.defaults(notes.append if as_json else (lambda text: print(text, file=sys.stderr)))
    except ShmguardError as exc:
        if not as_json:
            raise
        return json_failure(exc, notes, sys.stderr)
    return patch(defaults, list(files), in_place=in_place, check=check, follow_symlinks=follow_symlinks,
                 options=options, as_json=as_json, notes=notes)


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.commands.declare import job_options

    @click.command("patch")
    @job_options
    @click.option("-i", "--in-place", is_flag=True, help="Rewrite the files (atomically) instead of printing.")
    @click.option("--check", is_flag=True, help="Change nothing; print a diff of what would change and exit 1 if anything would.")
    @click.option("--follow-symlinks", is_flag=True, help="With -i, patch the file a symlink points to (else a symlink is refused).")
    @click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object on stderr (every template, what changed or why not).")
    @click.option("--kind", "kinds", multiple=True, metavar="KIND", help="Only objects of this kind (`Job`, or with its group: `batch.volcano.sh/Job`); repeatable.")
    @click.option("--name", "names", multiple=True, metavar="PATTERN", help="Only objects whose name matches (shell pattern); repeatable.")
    @click.option("-l", "--selector", "labels", multiple=True, metavar="KEY[=VALUE]", help="Only objects with this label; repeatable (all must match).")
    @click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS", help="Only objects in this namespace; repeatable.")
    @click.option("--opt-in", is_flag=True, help='Only templates whose object or template is annotated shmguard.io/skip: "false".')
    @click.option("--container", metavar="NAME[,NAME]", help="The container(s) that run the DataLoader (default: the first that is not a known sidecar).")
    @click.option("--memory", metavar="SIZE", help="A memory limit for the DataLoader containers: given to those with none (default: "
                       "none given), a lower one raised to it; never below what the job needs.")
    @click.option("--size-unsized", is_flag=True, help="Give an existing memory /dev/shm without sizeLimit the job's size (default: keep it unsized).")
    @click.option("--include-init", is_flag=True, help="Mount /dev/shm into init containers and sidecars too.")
    @click.option("--all-templates", is_flag=True, help="Size every pod template, not only the training ones (a server, a "
                       "database, a proxy: see the README's Kubernetes section for how a template is judged).")
    @click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
    def cli_patch(job, in_place, check, follow_symlinks, as_json, files, **selection) -> int:
        """    Add or fix the /dev/shm emptyDir, its mount and the memory limits in every pod template of FILES (or stdin).

        Finds the pod templates of Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet,
        Job, CronJob, the Kubeflow jobs (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob,
        JAXJob), Trainer runtimes, KubeRay, JobSet, Volcano (and its JobTemplate, CronJob),
        LeaderWorkerSet, Argo (and the objects its resource steps create), Tekton, KServe,
        Knative, Kubeflow Notebook and `kind: List`; inside Katib Experiments and Trials and
        AppWrappers (read by the wrapped object's kind); compiled Kubeflow Pipelines steps
        (their need told); and of any other object by shape. By default a template is
        sized unless affirmative evidence says it does not train (a command that only
        sleeps or fetches, a database, proxy, operator, hub, exporter or serving image, a
        serving kind), which the "left alone" line names; with the job options given, a
        template with no evidence either way is sized (--all-templates sizes every one);
        shmguard.io/skip: "true" leaves one alone. shmguard.io/*
        annotations on an object or template override the job options. Never lowers a
        limit or a request, never shrinks a /dev/shm. Only the lines that must change are
        changed: comments, order, quoting and layout stay. Patching twice changes nothing.
    """
        return patch_command(job, files, in_place=in_place, check=check, follow_symlinks=follow_symlinks, as_json=as_json,
                             **selection)

    return cli_patch
