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


def hoard_endpoints(hosts, hostvars, scheme, port_var, default_port):
    """SCHEME://ADDR:PORT of each host: its hoard_listen_addr (else its
    default IPv4) and its own port variable, else default_port (a role's
    default, which hostvars does not hold)."""
    out = []
    for host in hosts:
        hv = hostvars[host]
        addr = hv.get("hoard_listen_addr") or hv["ansible_default_ipv4"]["address"]
        out.append(f"{scheme}://{addr}:{hv.get(port_var, default_port)}")
    return out


class FilterModule:
    def filters(self):
        return {"hoard_present": hoard_present, "hoard_argv": hoard_argv, "systemd_exec": systemd_exec,
                "hoard_endpoints": hoard_endpoints}
