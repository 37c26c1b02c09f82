from django.db import models


class SideEffect(models.Model):
    """One row per time a job's side effect happened; tests count them."""

    key = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)


class Item(models.Model):
    name = models.CharField(max_length=50)
