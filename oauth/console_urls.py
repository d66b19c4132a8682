from django.urls import path

from oauth import views

app_name = "oauth"

urlpatterns = [
    path("", views.clients, name="clients"),
    path("<int:pk>/revoke/", views.revoke, name="revoke"),
]
