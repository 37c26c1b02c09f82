from django.db import models


class Write(models.Model):
    """One row per ``bench.write_once`` side effect."""

    n = models.IntegerField()

    objects: models.Manager["Write"] = models.Manager()

    def __str__(self) -> str:
        return str(self.n)
