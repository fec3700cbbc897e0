"""Filters that turn a daemon's option table (long option name -> value, the
keys of /etc/hoard/hoard.toml) into a command line: for daemons started without
--config, and for systemd's ExecStart= syntax."""


def hoard_present(options):
    """The options that are set: None and "" mean "the daemon's default"."""
    return {k: v for k, v in options.items() if v is not None and v != ""}


def hoard_argv(options, binary, positional=("mountpoint",)):
    """[binary, --key, value, ...]: true flags bare, false ones left out, lists
    comma-separated (CLI11 splits them), positionals (hoard-fuse's mountpoint)
    last."""
    argv, tail = [binary], []
    for key, value in sorted(hoard_present(options).items()):
        if key in positional:
            tail.append(str(value))
        elif value is True:
            argv.append("--" + key)
        elif value is False:
            continue
        elif isinstance(value, (list, tuple)):
            argv += ["--" + key, ",".join(str(v) for v in value)]
        else:
            argv += ["--" + key, str(value)]
    return argv + tail


def systemd_exec(argv):
    """One ExecStart= line: each word double-quoted where it must be, with
    systemd's specifiers (%) and variables ($) escaped, so a path or value is
    passed as it is."""
    words = []
    for arg in argv:
        word = str(arg).replace("%", "%%").replace("$", "$$")
        if word == "" or any(c in word for c in " \t\"'\\;"):
            word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
        words.append(word)
    return " ".join(words)


class FilterModule:
    def filters(self):
        return {"hoard_present": hoard_present, "hoard_argv": hoard_argv, "systemd_exec": systemd_exec}
