"""Client ID Metadata Documents: a client whose id is an https URL, its metadata fetched from there.

django-oauth-toolkit fetches the document (https only, public addresses only, no
redirects, size and time bounded) and registers the public client it describes. Before
that, this fetcher holds the document to the rules dynamic registration follows
(`oauth.registration.metadata_problem`): the authorization code and refresh grants only,
redirect URIs on https or loopback http, no fragments.
"""

from __future__ import annotations

from oauth2_provider.cimd import CIMDError, SafeMetadataFetcher

from audit.typealiases import JSONObject
from oauth.registration import metadata_problem


class CheckedMetadataFetcher(SafeMetadataFetcher):  # type: ignore[misc]
    def fetch(self, client_id: str) -> tuple[JSONObject, int]:
        metadata, max_age = self.fetch_document(client_id)
        problem = metadata_problem({"token_endpoint_auth_method": "none", **metadata})
        if problem:
            raise CIMDError(problem)
        return metadata, max_age

    def fetch_document(self, client_id: str) -> tuple[JSONObject, int]:
        """Return the document and how long it may be kept (the toolkit's hardened fetch)."""
        document: tuple[JSONObject, int] = super().fetch(client_id)
        return document
