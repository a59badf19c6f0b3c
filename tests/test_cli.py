import pytest

from taskloom.backend.cache import BuildCache
from taskloom.cli import format_bytes, main


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TASKLOOM_CACHE_MAX_BYTES", raising=False)
    return BuildCache.default()


def test_cache_info(cache, capsys):
    cache.store("a" * 64, {"lib.so": b"x" * 2048})
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache.root) in out
    assert "entries: 1" in out
    assert "2.0 GiB" in out and "bytes" in out


def test_cache_clear(cache, capsys):
    cache.store("a" * 64, {"lib.so": b"x" * 2048})
    assert main(["cache", "clear"]) == 0
    assert "freed 2.1 KiB" in capsys.readouterr().out  # the library and meta.json, with its hash
    assert cache.info()["entries"] == 0
    main(["cache", "info"])
    assert "entries: 0" in capsys.readouterr().out


def test_bad_environment_is_an_error_not_a_crash(cache, monkeypatch, capsys):
    monkeypatch.setenv("TASKLOOM_CACHE_MAX_BYTES", "lots")
    assert main(["cache", "info"]) == 1
    assert "TASKLOOM_CACHE_MAX_BYTES" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    for argv in ([], ["cache"], ["cache", "shred"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2


def test_format_bytes():
    assert format_bytes(0) == "0 B" and format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 1024 ** 3) == "3.0 GiB"
