from django.urls import include, path

from tests.urls import urlpatterns as base

urlpatterns = [*base, path("", include("django_prometheus.urls"))]
