"""The yardstick: Flask's hello world (served by gunicorn gthread, 3 workers x 4 threads)."""

from flask import Flask

app = Flask(__name__)


@app.get("/")
def hello() -> str:
    return "Hello, World!"
