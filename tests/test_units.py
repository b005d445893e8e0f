import pytest

from agentsim.config.units import UnitError, parse_bandwidth, parse_bytes, parse_count, parse_duration, parse_flops


@pytest.mark.parametrize("text,expected", [
    ("288GB", 288e9), ("279GiB", 279 * 2**30), ("512MB", 512e6), ("4TB", 4e12), ("100B", 100.0),
    (1.5e9, 1.5e9), ("1.5e9", 1.5e9), ("64KiB", 65536.0),
])
def test_bytes(text, expected):
    assert parse_bytes(text) == pytest.approx(expected)


@pytest.mark.parametrize("text,expected", [
    ("900GB/s", 900e9), ("8TB/s", 8e12), ("50GiB/s", 50 * 2**30), ("400Gb/s", 50e9), (1e9, 1e9),
])
def test_bandwidth(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize("text,expected", [
    ("10us", 1e-5), ("5ms", 5e-3), ("2s", 2.0), ("5m", 300.0), ("5min", 300.0), ("2h", 7200.0), ("1d", 86400.0), (3, 3.0),
    ("1h30m", 5400.0), ("2h 0m 30s", 7230.0), ("1h20m00s", 4800.0), ("1d12h", 129600.0), ("1m30.5s", 90.5),
])
def test_duration(text, expected):
    assert parse_duration(text) == pytest.approx(expected)


def test_flops_and_counts():
    assert parse_flops("5PFLOPS") == pytest.approx(5e15)
    assert parse_flops("989TFLOPS") == pytest.approx(989e12)
    assert parse_count("37B") == pytest.approx(37e9)
    assert parse_count("15K") == pytest.approx(15e3)


@pytest.mark.parametrize("parser,text", [
    (parse_bytes, "900GB/s"), (parse_bytes, "12 parsecs"), (parse_bytes, "GB"), (parse_bandwidth, "900GB"),
    (parse_duration, "5 furlongs"), (parse_duration, "5GB"), (parse_bytes, True), (parse_bytes, "inf"),
    (parse_duration, "30m1h"), (parse_duration, "1h1h"), (parse_duration, "1h30x"), (parse_duration, "1h-30m"),
])
def test_wrong_units_are_rejected(parser, text):
    with pytest.raises(UnitError):
        parser(text)


@pytest.mark.parametrize("text", ["48Gb", "1Tb", "10Mib"])
def test_a_size_in_bits_is_refused_with_the_byte_spelling(text):
    """Bits are for link speeds; a capacity in bits would silently be an eighth of the intent."""
    with pytest.raises(UnitError, match="is in bits"):
        parse_bytes(text)
