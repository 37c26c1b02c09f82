from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0013_outbox_plain_rows"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxentry",
            name="pushed_to",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="The run_id of the Redis server it was pushed to, unconfirmed by replicas.",
                max_length=64,
            ),
        ),
    ]
