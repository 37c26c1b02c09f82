"""The admin alone: the browser section serves the job browser's pages."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
