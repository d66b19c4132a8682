from django.urls import path

from accounts import oidc, views

urlpatterns = [
    path("login/", views.login, name="login"),
    path("logout/", views.logout, name="logout"),
    path("oidc/authenticate/", oidc.SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc.CallbackView.as_view(), name="oidc_authentication_callback"),
]
