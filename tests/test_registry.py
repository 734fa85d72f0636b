import types

import pytest

from django_procedures import Procedure, Status, registry, step
from django_procedures.exceptions import ProceduresConfigError, UnknownProcedureType
from django_procedures.testing import isolated_registry


def test_type_name_defaults_to_module_and_qualname():
    class Plain(Procedure):
        @step
        def only(self, ctx):
            pass

    assert Plain.type_name == "tests.test_registry.test_type_name_defaults_to_module_and_qualname.<locals>.Plain"
    assert registry.get(Plain.type_name) is Plain


def test_two_classes_with_one_type_name_is_an_error():
    class First(Procedure):
        type_name = "tests.duplicate"

        @step
        def a(self, ctx):
            pass

    with pytest.raises(ProceduresConfigError, match=r"two procedure classes share the type name 'tests\.duplicate'"):
        class Second(Procedure):
            type_name = "tests.duplicate"

            @step
            def a(self, ctx):
                pass


def test_a_class_without_steps_must_say_it_is_abstract():
    with pytest.raises(ProceduresConfigError, match="set abstract = True"):
        class Empty(Procedure):
            pass

    class Base(Procedure):
        abstract = True

    class Concrete(Base):
        @step
        def go(self, ctx):
            pass

    assert registry.get(Concrete.type_name) is Concrete
    assert Base.type_name not in registry.type_names()


def test_steps_keep_class_order_and_inherit():
    class Parent(Procedure):
        abstract = True

        @step
        def b_first(self, ctx):
            pass

        @step
        def a_second(self, ctx):
            pass

    class Child(Parent):
        @step
        def c_third(self, ctx):
            return Status.done()

    assert [s.name for s in Child.steps] == ["b_first", "a_second", "c_third"]


def test_unknown_type_names_say_where_to_define_them():
    with pytest.raises(UnknownProcedureType, match="no procedure class is registered as 'nope'"):
        registry.get("nope")


def test_non_idempotent_steps_cannot_be_atomic():
    with pytest.raises(TypeError, match="cannot be atomic"):
        step(idempotent=False, atomic=True)
    spec = step(idempotent=False)(lambda self, ctx: None)._procedure_step
    assert (spec.atomic, spec.idempotent) == (False, False)


def test_autodiscovery_found_the_test_apps_procedures():
    assert "testapp.ThreeSteps" in registry.type_names()


def test_isolated_registry_forgets_the_classes_defined_inside_it():
    from django_procedures.testing import isolated_registry

    before = registry.type_names()
    with isolated_registry():
        class Temporary(Procedure):
            type_name = "tests.Temporary"

            @step
            def only(self, ctx):
                pass

        assert registry.get("tests.Temporary") is Temporary
    assert registry.type_names() == before
    with pytest.raises(UnknownProcedureType):
        registry.get("tests.Temporary")


async def _async_step(self, ctx):
    pass


async def _async_generator_step(self, ctx):
    yield


@pytest.mark.parametrize(("name", "method", "message"), [
    ("charge", step(atomic=False)(_async_generator_step), "is an async generator"),
    ("execute", _async_generator_step, "is an async generator"),
    ("rollback", _async_step, r"is an async def: rollback\(\) is called on a worker thread"),
    ("on_child_failed", _async_step, r"is an async def: on_child_failed\(\) is called on a worker thread"),
    ("lock_keys", _async_step, r"is an async def: lock_keys\(\) is called"),
])
def test_what_the_worker_cannot_await_is_refused_when_the_class_is_defined(name, method, message):
    def body(ns):
        ns.update(__module__=__name__, type_name="tests.AsyncStep", go=step(lambda self, ctx: None), **{name: method})

    with pytest.raises(ProceduresConfigError, match=rf"tests\.test_registry\.AsyncStep\.{name} {message}"):
        types.new_class("AsyncStep", (Procedure,), exec_body=body)
    assert "tests.AsyncStep" not in registry.type_names()


def test_an_async_rollback_in_an_abstract_base_is_refused_there_too():
    with pytest.raises(ProceduresConfigError, match=r"AsyncBase\.rollback is an async def"):
        class AsyncBase(Procedure):
            abstract = True

            async def rollback(self, ctx):
                pass


def test_an_atomic_async_step_is_refused_where_it_is_declared():
    with pytest.raises(ProceduresConfigError, match=r"async def step with atomic=True: an async step is never "
                                                    r"atomic \(a transaction belongs to one thread's connection"):
        @step(atomic=True)
        async def charge(self, ctx):
            pass


def test_an_async_step_is_marked_async_and_not_atomic():
    with isolated_registry():
        class Fetch(Procedure):
            @step
            async def fetch(self, ctx):
                pass

            @step(timeout=5)
            def store(self, ctx):
                pass

        class Loop(Procedure):
            async def execute(self, ctx):
                pass

    assert [(s.name, s.atomic, s.is_async, s.timeout) for s in Fetch.steps] == [
        ("fetch", False, True, None), ("store", True, False, 5)]
    assert [(s.name, s.atomic, s.is_async) for s in Loop.steps] == [("execute", False, True)]
