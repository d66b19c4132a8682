"""The demo services, mounted at /demo-services/ (see demo.views for the protocol)."""

from django.urls import URLPattern, URLResolver, path

from demo import views

app_name = "demo"

urlpatterns: list[URLPattern | URLResolver] = [
    path("tools/<str:tool>", views.execute, name="execute"),
    path("tools/<str:tool>/preview", views.preview, name="preview"),
    path("tools/<str:tool>/verify", views.verify_effect, name="verify"),
]
