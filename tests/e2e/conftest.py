"""The e2e stack fixture (redis-server, web, worker, the holding fake model), for every test here."""

from tests.e2e.test_steer_e2e import stack  # noqa: F401
