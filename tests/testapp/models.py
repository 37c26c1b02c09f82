from django.db import models


class SideEffect(models.Model):
    """One row per time a job's side effect happened; tests count them."""

    key = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)


class Item(models.Model):
    name = models.CharField(max_length=50)
