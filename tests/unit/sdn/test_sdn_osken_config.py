"""os-ken's configuration without oslo_config (evio.sdn.osken_config): registered options, their defaults
and types, the command line evio hands it, and what it refuses."""

import pytest

from evio.sdn.osken_config import BoolOpt, ConfigOpts, FloatOpt, IntOpt, ListOpt, MultiStrOpt, Opt, StrOpt


def options() -> ConfigOpts:
    conf = ConfigOpts()
    conf.register_cli_opts([
        StrOpt("listen-host", default="0.0.0.0", help="where"),
        IntOpt("tcp-port", default=None, min=0),
        ListOpt("switches", item_type=str, default=[]),
        BoolOpt("verbose", default=False),
        MultiStrOpt("tag", default=[]),
    ])
    conf.register_opts([FloatOpt("socket-timeout", default=5.0)])
    return conf


def test_defaults_until_the_command_line_sets_an_option() -> None:
    conf = options()
    assert (conf.listen_host, conf.tcp_port, conf.switches, conf.verbose, conf.socket_timeout) == ("0.0.0.0", None, [], False, 5.0)
    conf(args=["--listen-host", "127.0.0.1", "--tcp-port=6653", "--switches", "a:1, b:2", "--verbose",
               "--tag", "x", "--tag", "y"], project="os_ken")
    assert (conf.listen_host, conf.tcp_port, conf.switches, conf.verbose, conf.tag) == ("127.0.0.1", 6653, ["a:1", "b:2"], True, ["x", "y"])
    conf(args=[])  # called again: the defaults again
    assert (conf.listen_host, conf.tcp_port, conf.verbose) == ("0.0.0.0", None, False)
    conf(args=["--verbose=no"])
    assert conf.verbose is False
    conf(args=["--verbose", "--noverbose"])  # a boolean is a flag, and --noNAME clears it
    assert conf.verbose is False


@pytest.mark.parametrize("args", [["--socket-timeout", "1"],  # registered, but not a command-line option
                                  ["--nonesuch", "1"], ["listen-host"], ["--tcp-port"], ["--tcp-port", "many"],
                                  ["--verbose=maybe"], ["--notcp-port"]])
def test_an_unknown_option_or_a_value_that_does_not_convert_is_refused(args: list[str]) -> None:
    conf = options()
    with pytest.raises(ValueError):
        conf(args=args)
    assert conf.tcp_port is None


def test_an_unknown_name_is_an_attribute_error_and_a_group_holds_its_own() -> None:
    conf = options()
    with pytest.raises(AttributeError):
        conf.nonesuch  # noqa: B018
    conf.register_opts([Opt("frr-version", str, default="3.0"), IntOpt("server-port", default=2600)], group="zapi")
    assert (conf.zapi.frr_version, conf.zapi.server_port) == ("3.0", 2600)


def test_the_same_option_again_is_no_error_but_a_different_one_is() -> None:
    conf = options()
    assert conf.register_opt(StrOpt("listen-host", default="0.0.0.0")) is False
    with pytest.raises(ValueError):
        conf.register_opt(StrOpt("listen-host", default="::"))
