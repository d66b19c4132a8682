"""The reviewer console's views: the queue, a call's page, decisions, the overview."""
