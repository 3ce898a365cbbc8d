"""sync_to: heard_from: ranks keep their version until heard from; unheard and re-boosted ranks get the newest."""

from nimbus.offpolicy.heard_from import HeardFromVersions


def test_a_rank_never_heard_from_gets_the_newest_version() -> None:
    versions = HeardFromVersions()
    versions.heard(ranks=(0,), newest=1)
    assert versions.version_for(rank=0, newest=3) == 1     # rank 0 waits until its data is consumed
    assert versions.version_for(rank=2, newest=3) == 3     # a boosted rank does not start from version 0


def test_a_rank_boosted_again_starts_from_the_newest_version() -> None:
    versions = HeardFromVersions()
    versions.heard(ranks=(0, 1), newest=2)
    versions.forget(ranks=(1,))
    assert (versions.version_for(rank=0, newest=7), versions.version_for(rank=1, newest=7)) == (2, 7)
    assert versions.held() == {2}
