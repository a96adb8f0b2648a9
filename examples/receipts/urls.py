from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("checkout/", views.checkout, name="checkout"),
    path("receipts/<str:task_id>/", views.receipt_status, name="receipt-status"),
]
