"""Loopback fakes of the services WorkTrain talks to (GitHub, GitLab), for the tests."""
