from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "memoryhub.usage"
    label = "usage"
    verbose_name = "Usage over time"
