"""dtq's APIView: the DRF settings the API relies on, set on its views, so a project's
REST_FRAMEWORK (empty, or tuned for its own API) neither has to carry them nor can change them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from django.templatetags.static import static
from drf_spectacular import generators, utils
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import views
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.metadata import SimpleMetadata
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.throttling import BaseThrottle

from .exceptions import exception_handler
from .parsers import JSONParser, Request

if TYPE_CHECKING:
    from rest_framework.permissions import _PermissionClass  # an alias of DRF's stubs only


class APIView(views.APIView):
    renderer_classes = (JSONRenderer, BrowsableAPIRenderer)
    parser_classes = (JSONParser,)
    # Typed as DRF's are, for the views that add DestructiveMixin's. Reads are open; destructive
    # views set their own (DestructiveMixin).
    authentication_classes: Sequence[type[BaseAuthentication]] = (SessionAuthentication,)
    permission_classes: Sequence[_PermissionClass] = (AllowAny,)
    # Pinned too: a project's throttles, versioning or negotiation would hold on the DRF path
    # alone, not on the submit fast path (dtq_api.fastpath), which answers as these do.
    throttle_classes: Sequence[type[BaseThrottle]] = ()
    versioning_class = None
    content_negotiation_class = DefaultContentNegotiation
    metadata_class = SimpleMetadata
    schema = AutoSchema()

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        # DRF's, with dtq's Request: it reads a body sent without Content-Length.
        return Request(request, parsers=self.get_parsers(), authenticators=self.get_authenticators(),
                       negotiator=self.get_content_negotiator(), parser_context=self.get_parser_context(request))

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Any]:
        return exception_handler  # the {"error": {...}} envelope, whatever EXCEPTION_HANDLER says


def extend_schema(**kwargs: Any) -> Callable[[Any], Any]:
    """drf-spectacular's extend_schema, built on its AutoSchema rather than on DEFAULT_SCHEMA_CLASS.

    On a method, extend_schema subclasses REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS as it is when the
    views are imported: DRF's own AutoSchema in a project without that setting, and then the
    schema endpoint fails.
    """
    decorate = utils.extend_schema(**kwargs)

    def decorator(f: Any) -> Any:
        if getattr(f, "schema", None) is not None or getattr(f, "kwargs", {}).get("schema"):
            return decorate(f)  # a class (its own schema), or a method extended before
        f.schema = AutoSchema  # the first place extend_schema looks for the class to extend
        try:
            return decorate(f)
        finally:
            del f.schema  # else copies of the method (extend_schema_view) would start over from it

    return decorator


class SchemaGenerator(generators.SchemaGenerator):
    """dtq's endpoints only, wherever the project mounts them: a project's own DRF views belong in
    its own schema (and may use DRF's default schema class, which drf-spectacular refuses)."""

    # drf-spectacular's endpoints are (path, path_regex, method, view); DRF's stubs type its own triples.
    endpoints: Any

    def _initialise_endpoints(self) -> None:
        super()._initialise_endpoints()
        self.endpoints = [e for e in self.endpoints
                          if issubclass(getattr(e[3], "cls", object), (APIView, SchemaView))]


class SchemaView(SpectacularAPIView):
    """/api/schema/: described as dtq's API whatever the project's SPECTACULAR_SETTINGS say."""

    generator_class = SchemaGenerator
    custom_settings = {"TITLE": "dtq API", "DESCRIPTION": "Distributed task queue on Redis Streams",
                       "VERSION": "1.0.0"}

    @extend_schema(exclude=True)  # not an operation of the API; its path still sets the tags' prefix
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)


class DocsView(SpectacularSwaggerView):
    """/api/docs/: Swagger UI over /api/schema/, its files served from drf-spectacular-sidecar's
    static files (no CDN), so the page works on a host without internet access."""

    url_name = "schema"
    title = "dtq API"
    authentication_classes = (SessionAuthentication,)
    permission_classes = (AllowAny,)

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(f"drf_spectacular_sidecar/swagger-ui-dist/{filename}")

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static("drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png")
