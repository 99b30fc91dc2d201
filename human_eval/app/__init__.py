"""The rating app, as Flask's tutorial app is laid out: ``factory.create_app`` builds the app and
registers the blueprints (``annotator``, ``admin``), which import the helpers (``enrolment``,
``forms``, ``errors``) and the request's database session (``maxbench.human_eval.store.db``)."""
