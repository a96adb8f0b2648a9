"""dtq's APIView: the DRF settings the API relies on, set on its views, so a project's
REST_FRAMEWORK (empty, or tuned for its own API) neither has to carry them nor can change them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import views
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer

from .exceptions import exception_handler
from .parsers import JSONParser


class APIView(views.APIView):
    renderer_classes = (JSONRenderer, BrowsableAPIRenderer)
    parser_classes = (JSONParser,)
    authentication_classes = (SessionAuthentication,)
    permission_classes = (AllowAny,)  # reads are open; destructive views set their own (DestructiveMixin)
    schema = AutoSchema()

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Any]:
        return exception_handler  # the {"error": {...}} envelope, whatever EXCEPTION_HANDLER says
