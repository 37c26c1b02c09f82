from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0011_batches"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxentry",
            name="limit_key",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="The key its limits count under.",
                max_length=100,
            ),
        ),
    ]
