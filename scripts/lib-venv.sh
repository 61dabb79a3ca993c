# Shared by scripts/install-*.sh (sourced, not run): the reuse / lock / stamp steps every
# installer takes around its own pip installs. The caller sets these first:
#   venv        the environment's folder
#   python      the interpreter to build it from
#   stamp       the stamp file inside it
#   stamp_text  what the stamp must say for the environment to be reused as it is
# bidkv_python_version prints "X.Y" of $python, for the stamp text.

bidkv_python_version() {
    "$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}

# bidkv_venv_reuse NAME EXE NOTE: when the stamp matches and $venv/bin/EXE runs, say so and exit
# 0 with the environment's path on standard output (the callers capture it).
bidkv_venv_reuse() {
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] && [ -x "$venv/bin/$2" ]; then
        echo "$1: reusing $venv$3" >&2
        echo "$venv"
        exit 0
    fi
}

# bidkv_venv_begin NAME EXE NOTE WHAT: reuse the environment if it is current; otherwise take
# the lock, look again (another installer may just have finished it), then make it afresh.
bidkv_venv_begin() {
    bidkv_venv_reuse "$1" "$2" "$3"
    mkdir -p "$(dirname "$venv")"
    # One installer at a time per environment; the second one waits, then finds the stamp.
    exec 9>"$venv.lock"
    flock 9
    bidkv_venv_reuse "$1" "$2" "$3"
    bidkv_venv_start=$(date +%s)
    echo "$1: installing $4 into $venv" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2
}

# bidkv_venv_finish NAME: write the stamp (only now, so a failed install is never reused) and
# print the environment's path on the last line.
bidkv_venv_finish() {
    printf '%s' "$stamp_text" >"$stamp"
    echo "$1: done in $(( $(date +%s) - bidkv_venv_start )) s" >&2
    echo "$venv"
}
